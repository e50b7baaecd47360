package registrydisk

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestCacheTrusted: the image cache is a fixed path root writes images
// (pulled with its registry credentials) to and hands to QEMU, so it is
// opened as one (safefs.OpenTrusted): a cache directory another user made
// first, one that is a symbolic link, one below a directory another user
// owns and one below a link are all refused, naming the directory, with
// nothing pulled into or through them. A cache directory made by root in a
// root-owned tree is used.
func TestCacheTrusted(t *testing.T) {
	testenv.Root(t, "directories of another user are made with chown")
	host := serve(t)
	ref := host + "/disks/trusted:v1"
	push(t, ref, image(t, map[string]string{"disk/disk.img": "trusted disk"}))
	other := otherUser(t)

	for _, tc := range []struct {
		name string
		// setup makes the case in top and returns the cache path to give,
		// the directory that must be refused and the directories that
		// must be left as they were (empty).
		setup func(top string) (cache, refused string, untouched []string)
		want  string
	}{
		{"made by another user", func(top string) (string, string, []string) {
			cache := filepath.Join(top, "cache")
			mkdirAs(t, cache, 0o755, other)
			return cache, cache, []string{cache}
		}, "is owned by uid"},
		{"a link", func(top string) (string, string, []string) {
			real := filepath.Join(top, "real")
			mkdirAs(t, real, 0o711, 0)
			cache := filepath.Join(top, "cache")
			if err := os.Symlink(real, cache); err != nil {
				t.Fatal(err)
			}
			return cache, cache, []string{real}
		}, "is a symbolic link"},
		{"below another user's directory", func(top string) (string, string, []string) {
			users := filepath.Join(top, "users")
			mkdirAs(t, users, 0o755, other)
			cache := filepath.Join(users, "cache")
			mkdirAs(t, cache, 0o711, 0) // root's, but the user can swap it
			return cache, users, []string{cache}
		}, "is owned by uid"},
		{"below a link", func(top string) (string, string, []string) {
			real := filepath.Join(top, "real")
			mkdirAs(t, real, 0o755, 0)
			link := filepath.Join(top, "link")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(link, "cache"), link, []string{real}
		}, "is a symbolic link"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			top := filepath.Join(t.TempDir(), "top")
			mkdirAs(t, top, 0o755, 0)
			cache, refused, untouched := tc.setup(top)
			c := &Cache{Dir: cache}
			p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
			var te *safefs.TrustError
			if err == nil || !errors.As(err, &te) || te.Dir != refused || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Fetch into %s: %q, %v; want it refused: %s %s", cache, p, err, refused, tc.want)
			}
			for _, d := range untouched {
				if left := cacheLeft(t, d); len(left) > 0 {
					t.Errorf("written into %s: %v", d, left)
				}
			}
		})
	}

	cache := filepath.Join(t.TempDir(), "top", "cache")
	c := &Cache{Dir: cache}
	p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
	if err != nil || filepath.Dir(p) != cache || read(t, p) != "trusted disk" {
		t.Errorf("Fetch into a cache root makes: %q, %v", p, err)
	}
}

// otherUser is the virtlauncher system user's id when it exists, else an
// id no account has: a user that is neither root nor the test.
func otherUser(t *testing.T) int {
	t.Helper()
	if u, err := user.Lookup("virtlauncher"); err == nil {
		if n, err := strconv.Atoi(u.Uid); err == nil {
			return n
		}
	}
	return 1879300002
}

// mkdirAs makes p, mode perm exactly, owned by uid.
func mkdirAs(t *testing.T, p string, perm os.FileMode, uid int) {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.Chmod(p, perm), os.Chown(p, uid, uid)); err != nil {
		t.Fatal(err)
	}
}
