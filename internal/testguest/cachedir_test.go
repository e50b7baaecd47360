package testguest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// squatter is the user who made the cache directory before root did: a
// bare id no account has.
const squatter = 1879300002

// cacheTop is a root-owned /var/tmp stand-in: sticky and world-writable.
func cacheTop(t *testing.T) string {
	t.Helper()
	testenv.Root(t, "another user's directory is made with chown")
	top := filepath.Join(t.TempDir(), "var-tmp")
	if err := errors.Join(os.Mkdir(top, 0o700), syscall.Chmod(top, 0o1777)); err != nil {
		t.Fatal(err)
	}
	return top
}

// state is the names, owners and modes below dir, for "nothing changed".
func state(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			b.WriteString(p + " " + err.Error() + "\n")
			return nil
		}
		fi, err := os.Lstat(p)
		if err == nil {
			st := fi.Sys().(*syscall.Stat_t)
			fmt.Fprintf(&b, "%s %v %d\n", p, fi.Mode(), st.Uid)
		}
		return nil
	})
	return b.String()
}

// buildInto builds from sources that fail at the kernel (an empty boot
// dir): a cache dir Build accepts gets that error, a refused one the
// refusal, before anything is looked at.
func buildInto(t *testing.T, cacheDir string) error {
	t.Helper()
	needBusybox(t)
	_, err := (Sources{BootDir: t.TempDir()}).Build(context.Background(), cacheDir)
	if err == nil {
		t.Fatal("built a guest without a kernel")
	}
	return err
}

// TestBuildRefusesCacheOfAnotherUser: a cache dir another user made first
// (the default one lies in /var/tmp, where anyone may) is refused with an
// error naming it and the fix, and nothing is written into it.
func TestBuildRefusesCacheOfAnotherUser(t *testing.T) {
	top := cacheTop(t)
	cache := filepath.Join(top, "virtlauncher-testguest")
	if err := errors.Join(os.Mkdir(cache, 0o755), os.Chown(cache, squatter, squatter)); err != nil {
		t.Fatal(err)
	}
	before := state(t, top)
	err := buildInto(t, cache)
	if !strings.Contains(err.Error(), cache+" is owned by uid 1879300002, not root") || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("Build into %s (another user's): %v, want it refused naming the directory and the fix", cache, err)
	}
	if after := state(t, top); after != before {
		t.Errorf("the refused cache changed:\n%s\nwas\n%s", after, before)
	}
}

// TestBuildRefusesCacheLink: a cache dir that is a symbolic link (to a
// directory of root's, even) is refused, and nothing is written where it
// points.
func TestBuildRefusesCacheLink(t *testing.T) {
	top := cacheTop(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "root.img"), []byte("root's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(top, "virtlauncher-testguest")
	if err := os.Symlink(victim, cache); err != nil {
		t.Fatal(err)
	}
	before := state(t, victim)
	err := buildInto(t, cache)
	if !strings.Contains(err.Error(), cache+" is a symbolic link") {
		t.Fatalf("Build into %s (a link): %v, want it refused naming the link", cache, err)
	}
	if after := state(t, victim); after != before {
		t.Errorf("written through the link:\n%s\nwas\n%s", after, before)
	}
}

// TestBuildRefusesCacheBelowAnotherUser: $XDG_CACHE_HOME in another
// user's home puts the cache below a directory that user can change.
func TestBuildRefusesCacheBelowAnotherUser(t *testing.T) {
	testenv.Root(t, "another user's directory is made with chown")
	home := filepath.Join(t.TempDir(), "home")
	if err := errors.Join(os.Mkdir(home, 0o755), os.Chown(home, squatter, squatter)); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(home, ".cache", "virtlauncher", "testguest")
	err := buildInto(t, cache)
	if !strings.Contains(err.Error(), home+" is owned by uid 1879300002") {
		t.Fatalf("Build into %s: %v, want it refused naming %s", cache, err, home)
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Errorf("made %v below the refused %s", ents, home)
	}
}

// TestBuildMakesCache: a missing cache dir in a sticky directory is
// made by root, 0755 (unprivileged QEMUs read the guest), and a fresh one
// is accepted again.
func TestBuildMakesCache(t *testing.T) {
	top := cacheTop(t)
	cache := filepath.Join(top, "virtlauncher-testguest")
	for i := 0; i < 2; i++ {
		if err := buildInto(t, cache); !strings.Contains(err.Error(), "install linux-image-amd64") {
			t.Fatalf("Build into a fresh cache: %v, want the missing kernel", err)
		}
	}
	fi, err := os.Lstat(cache)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || fi.Mode().Perm() != 0o755 || st.Uid != 0 {
		t.Errorf("%s: %v uid %d, want root's, 0755", cache, fi.Mode(), st.Uid)
	}
}
