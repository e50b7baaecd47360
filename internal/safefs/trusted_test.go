package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// otherUID is a user that is neither root nor the test: the one who gets
// to a fixed path first.
const otherUID = 1879300001

// trustTop is a root-owned 0755 directory for the cases (t.TempDir's own
// parent is root's and 0700, and so trusted too).
func trustTop(t *testing.T) string {
	t.Helper()
	testenv.Root(t, "directories of another user are made with chown")
	top := filepath.Join(t.TempDir(), "top")
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	return top
}

// mkdirOwned makes p with the raw mode bits (sticky included), owned by uid.
func mkdirOwned(t *testing.T, p string, mode uint32, uid int) {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(syscall.Chmod(p, mode), os.Chown(p, uid, uid)); err != nil {
		t.Fatal(err)
	}
}

func statOf(t *testing.T, p string) (os.FileMode, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid
}

// wantRefused checks that OpenTrusted(path) fails with a TrustError naming
// dir and saying want.
func wantRefused(t *testing.T, path, dir, want string) {
	t.Helper()
	d, err := OpenTrusted(path, 0o700)
	if err == nil {
		d.Close()
		t.Fatalf("OpenTrusted(%s) accepted it, want refused: %s %s", path, dir, want)
	}
	var te *TrustError
	if !errors.As(err, &te) || te.Dir != dir || !strings.Contains(err.Error(), want) || te.Fix == "" {
		t.Fatalf("OpenTrusted(%s): %v, want a TrustError naming %s: %s, and a fix", path, err, dir, want)
	}
	t.Logf("refused: %v", err)
}

func TestOpenTrustedMakes(t *testing.T) {
	top := trustTop(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(top, "a", "b", "leaf")
	d, err := OpenTrusted(p, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Path() != p {
		t.Errorf("Path %s, want %s", d.Path(), p)
	}
	for dir, want := range map[string]os.FileMode{filepath.Join(top, "a"): 0o755, filepath.Join(top, "a", "b"): 0o755, p: 0o755} {
		if mode, uid := statOf(t, dir); mode.Perm() != want || !mode.IsDir() || uid != 0 {
			t.Errorf("%s: %v uid %d, want a directory %04o of root's", dir, mode, uid, want)
		}
	}
	// An existing one of root's gets the mode asked for.
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	d2, err := OpenTrusted(p, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	d2.Close()
	if mode, _ := statOf(t, p); mode.Perm() != 0o700 {
		t.Errorf("%s: mode %v after OpenTrusted(0700)", p, mode)
	}
}

func TestOpenTrustedRefuses(t *testing.T) {
	t.Run("leaf of another user", func(t *testing.T) {
		top := trustTop(t)
		p := filepath.Join(top, "cache")
		mkdirOwned(t, p, 0o755, otherUID)
		wantRefused(t, p, p, "owned by uid 1879300001, not root")
		if mode, uid := statOf(t, p); mode.Perm() != 0o755 || uid != otherUID {
			t.Errorf("the refused directory changed: %v uid %d", mode, uid)
		}
	})
	t.Run("leaf a link", func(t *testing.T) {
		top := trustTop(t)
		target := filepath.Join(top, "target")
		mkdirOwned(t, target, 0o755, 0)
		p := filepath.Join(top, "cache")
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, p, p, "symbolic link")
		if mode, _ := statOf(t, target); mode.Perm() != 0o755 {
			t.Errorf("the link's target changed mode: %v", mode)
		}
	})
	t.Run("leaf writable by its group", func(t *testing.T) {
		top := trustTop(t)
		p := filepath.Join(top, "cache")
		mkdirOwned(t, p, 0o775, 0)
		wantRefused(t, p, p, "writable by users other than its owner (mode 0775)")
	})
	t.Run("leaf sticky and world-writable", func(t *testing.T) {
		top := trustTop(t)
		p := filepath.Join(top, "cache")
		mkdirOwned(t, p, 0o1777, 0)
		wantRefused(t, p, p, "mode 1777")
	})
	t.Run("leaf a file", func(t *testing.T) {
		top := trustTop(t)
		p := filepath.Join(top, "cache")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, p, p, "not a directory")
	})
	t.Run("parent of another user", func(t *testing.T) {
		top := trustTop(t)
		parent := filepath.Join(top, "home")
		mkdirOwned(t, parent, 0o755, otherUID)
		p := filepath.Join(parent, "cache")
		wantRefused(t, p, parent, "owned by uid 1879300001")
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was made below a refused directory: %v", p, err)
		}
	})
	t.Run("parent world-writable, not sticky", func(t *testing.T) {
		top := trustTop(t)
		parent := filepath.Join(top, "open")
		mkdirOwned(t, parent, 0o777, 0)
		wantRefused(t, filepath.Join(parent, "cache"), parent, "mode 0777")
	})
	t.Run("parent a link", func(t *testing.T) {
		top := trustTop(t)
		target := filepath.Join(top, "target")
		mkdirOwned(t, target, 0o755, 0)
		parent := filepath.Join(top, "parent")
		if err := os.Symlink(target, parent); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, filepath.Join(parent, "cache"), parent, "symbolic link")
		if ents, _ := os.ReadDir(target); len(ents) != 0 {
			t.Errorf("made %v through the link", ents)
		}
	})
	t.Run("in a sticky directory, another user's entry", func(t *testing.T) {
		top := trustTop(t)
		tmp := filepath.Join(top, "tmp")
		mkdirOwned(t, tmp, 0o1777, 0)
		p := filepath.Join(tmp, "cache")
		mkdirOwned(t, p, 0o700, otherUID)
		wantRefused(t, p, p, "owned by uid 1879300001")
	})
	t.Run("relative", func(t *testing.T) {
		testenv.Root(t, "as the other cases")
		wantRefused(t, "run/vlctl", "run/vlctl", "not an absolute path")
	})
}

// TestOpenTrustedSticky: root's entry in a sticky directory (/tmp,
// /var/tmp) is fine: others can add names there, not replace root's.
func TestOpenTrustedSticky(t *testing.T) {
	top := trustTop(t)
	tmp := filepath.Join(top, "tmp")
	mkdirOwned(t, tmp, 0o1777, 0)
	p := filepath.Join(tmp, "cache")
	for i := 0; i < 2; i++ { // made, then found
		d, err := OpenTrusted(p, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	if mode, uid := statOf(t, p); mode.Perm() != 0o755 || uid != 0 {
		t.Errorf("%s: %v uid %d", p, mode, uid)
	}
}
