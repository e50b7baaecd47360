package safefs

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// modes runs f once with openat2 (when this kernel has it) and once with
// the component-by-component walk older kernels get.
func modes(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, fallback := range []bool{false, true} {
		name := "openat2"
		if fallback {
			name = "walk"
		} else if !haveOpenat2() {
			t.Run(name, func(t *testing.T) { t.Skip("openat2 not available here") })
			continue
		}
		t.Run(name, func(t *testing.T) {
			old := forceFallback
			forceFallback = fallback
			t.Cleanup(func() { forceFallback = old })
			f(t)
		})
	}
}

// fixture is a directory to open and, beside it, an outside directory
// with a file that must never change: links below the opened directory
// point there.
type fixture struct {
	dir, outside, secret string
	d                    *Dir
}

const secretText = "root's own data\n"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	top := t.TempDir()
	f := &fixture{dir: filepath.Join(top, "tree"), outside: filepath.Join(top, "outside")}
	for _, d := range []string{f.dir, f.outside, filepath.Join(f.dir, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.secret = filepath.Join(f.outside, "secret")
	if err := os.WriteFile(f.secret, []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	f.d = d
	return f
}

// link plants a symbolic link at name below the fixture's directory.
func (f *fixture) link(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(f.dir, name)); err != nil {
		t.Fatal(err)
	}
}

// untouched fails unless the outside directory holds exactly the secret,
// unchanged.
func (f *fixture) untouched(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(f.secret)
	if err != nil || string(b) != secretText {
		t.Errorf("outside file changed: %q, %v", b, err)
	}
	st, err := os.Stat(f.secret)
	if err == nil {
		sys := st.Sys().(*syscall.Stat_t)
		if sys.Uid != uint32(os.Geteuid()) || st.Mode().Perm() != 0o600 {
			t.Errorf("outside file's owner or mode changed: uid %d, %v", sys.Uid, st.Mode())
		}
	}
	ents, _ := os.ReadDir(f.outside)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("outside directory holds %v, want only secret", names)
	}
}

func wantLinkErr(t *testing.T, err error, path string) {
	t.Helper()
	if !errors.Is(err, ErrSymlink) {
		t.Fatalf("got %v, want a refused link", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
}

func TestOpenFileRefusesLinks(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		f.link(t, f.secret, "last")
		f.link(t, f.outside, "mid")
		f.link(t, "sub", "rel") // a relative link staying inside is refused too
		for _, c := range []struct {
			name, link string
			flags      int
		}{
			{"last", "last", os.O_WRONLY | os.O_APPEND},
			{"last", "last", os.O_WRONLY | os.O_CREATE | os.O_TRUNC},
			{"last", "last", os.O_RDONLY},
			{"mid/secret", "mid", os.O_RDONLY},
			{"mid/new", "mid", os.O_WRONLY | os.O_CREATE},
			{"rel/x", "rel", os.O_WRONLY | os.O_CREATE},
		} {
			_, err := f.d.OpenFile(c.name, c.flags, 0o644)
			wantLinkErr(t, err, filepath.Join(f.dir, c.link))
		}
		_, err := f.d.OpenFile("last", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		wantLinkErr(t, err, filepath.Join(f.dir, "last"))
		if !errors.Is(err, fs.ErrExist) {
			t.Errorf("O_EXCL on a link: %v does not match fs.ErrExist", err)
		}
		f.untouched(t)
		if _, err := os.Lstat(filepath.Join(f.dir, "rel", "x")); err == nil {
			t.Error("a file was created through a relative link")
		}
	})
}

func TestOpenFileStaysBelow(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		for _, name := range []string{"", "/etc/passwd", "..", "../outside/secret", "sub/../../outside/secret"} {
			if _, err := f.d.OpenFile(name, os.O_RDONLY, 0); err == nil {
				t.Errorf("%q: opened", name)
			}
		}
		// An inside ".." that stays below is fine.
		if err := os.WriteFile(filepath.Join(f.dir, "ok"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		fl, err := f.d.OpenFile("sub/../ok", os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fl.Close()
		f.untouched(t)
	})
}

func TestOpenFileCreates(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		fl, err := f.d.OpenFile("sub/new.log", os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		fl.WriteString("hello\n")
		fl.Close()
		if b, _ := os.ReadFile(filepath.Join(f.dir, "sub", "new.log")); string(b) != "hello\n" {
			t.Errorf("wrote %q", b)
		}
		if _, err := f.d.OpenFile("sub/new.log", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640); !errors.Is(err, fs.ErrExist) {
			t.Errorf("second O_EXCL create: %v", err)
		}
	})
}

func TestOpenRefusesLinkedDir(t *testing.T) {
	f := newFixture(t)
	f.link(t, f.outside, "alias")
	_, err := Open(filepath.Join(f.dir, "alias"))
	wantLinkErr(t, err, filepath.Join(f.dir, "alias"))
	modes(t, func(t *testing.T) {
		_, err := f.d.OpenDir("alias")
		wantLinkErr(t, err, filepath.Join(f.dir, "alias"))
	})
}

func TestWriteFileReplacesLink(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		f.link(t, f.secret, "state.json")
		if err := f.d.WriteFile("state.json", []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := os.Lstat(filepath.Join(f.dir, "state.json"))
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
			t.Errorf("state.json: %v, %v; want a regular file 0644", st, err)
		}
		f.link(t, f.outside, "dirlink")
		wantLinkErr(t, f.d.WriteFile("dirlink/x.json", []byte("{}"), 0o600), filepath.Join(f.dir, "dirlink"))
		// Nothing temporary left behind.
		ents, _ := os.ReadDir(f.dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				t.Errorf("left %s", e.Name())
			}
		}
		f.untouched(t)
	})
}

func TestReadFileRefusesLinksAndFIFOs(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		f.link(t, f.secret, "log")
		_, err := f.d.ReadFile("log")
		wantLinkErr(t, err, filepath.Join(f.dir, "log"))
		if err := unix.Mkfifo(filepath.Join(f.dir, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := f.d.ReadFile("fifo"); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("FIFO: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("reading a FIFO blocked")
		}
	})
}

func TestMkdirAllSymlinkRemove(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		if err := f.d.MkdirAll("a/b/c", 0o750); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Lstat(filepath.Join(f.dir, "a", "b", "c")); err != nil || !st.IsDir() {
			t.Fatalf("a/b/c: %v", err)
		}
		if err := f.d.MkdirAll("a/b/c", 0o750); err != nil {
			t.Errorf("again: %v", err)
		}
		f.link(t, f.outside, "a/l")
		wantLinkErr(t, f.d.MkdirAll("a/l/new", 0o750), filepath.Join(f.dir, "a", "l"))
		wantLinkErr(t, f.d.Mkdir("a/l/new", 0o750), filepath.Join(f.dir, "a", "l"))
		wantLinkErr(t, f.d.Symlink("/x", "a/l/new"), filepath.Join(f.dir, "a", "l"))

		if err := f.d.Symlink(f.secret, "a/b/c/disk.img"); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.Readlink(filepath.Join(f.dir, "a/b/c/disk.img")); got != f.secret {
			t.Errorf("link points at %q", got)
		}
		if err := f.d.Symlink("/y", "a/b/c/disk.img"); !errors.Is(err, fs.ErrExist) {
			t.Errorf("symlink over an existing entry: %v", err)
		}
		// Remove takes the link away, not its target.
		if err := f.d.Remove("a/b/c/disk.img"); err != nil {
			t.Fatal(err)
		}
		if err := f.d.Remove("a/l"); err != nil {
			t.Fatal(err)
		}
		if err := f.d.Remove("a/b/c"); err != nil {
			t.Errorf("empty directory: %v", err)
		}
		if err := f.d.Remove("a/b/c"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing: %v", err)
		}
		f.untouched(t)
	})
}

func TestChownTree(t *testing.T) {
	testenv.Root(t, "changes owners")
	const uid, gid = 65534, 65533
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(f.dir, "sub", "deep"), 0o750))
		must(os.WriteFile(filepath.Join(f.dir, "sub", "deep", "file"), nil, 0o644))
		f.link(t, f.secret, "sub/filelink")
		f.link(t, f.outside, "sub/dirlink")
		must(f.d.ChownTree(".", uid, gid))
		for _, p := range []string{".", "sub", "sub/deep", "sub/deep/file", "sub/filelink", "sub/dirlink"} {
			st, err := os.Lstat(filepath.Join(f.dir, p))
			must(err)
			if sys := st.Sys().(*syscall.Stat_t); sys.Uid != uid || sys.Gid != gid {
				t.Errorf("%s: owner %d:%d", p, sys.Uid, sys.Gid)
			}
		}
		st, _ := os.Stat(f.outside)
		if st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Error("the directory a link points to was chowned")
		}
		f.untouched(t)

		// A hard link to a file outside is refused, and that file keeps
		// its owner.
		must(os.Link(f.secret, filepath.Join(f.dir, "sub", "hard")))
		err := f.d.ChownTree("sub", 0, 0)
		if err == nil || !strings.Contains(err.Error(), "hard links") || !strings.Contains(err.Error(), filepath.Join(f.dir, "sub", "hard")) {
			t.Errorf("hard link: %v", err)
		}
		must(os.Remove(filepath.Join(f.dir, "sub", "hard")))
		f.untouched(t)

		// The tree's top may not be a link.
		wantLinkErr(t, f.d.ChownTree("sub/dirlink", 0, 0), filepath.Join(f.dir, "sub", "dirlink"))
		wantLinkErr(t, ChownTree(filepath.Join(f.dir, "sub", "dirlink"), 0, 0), filepath.Join(f.dir, "sub", "dirlink"))
		f.untouched(t)
	})
}

func TestPathHelpers(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(f.dir, "sub", "x.json")
	if err := WriteFile(p, []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p); err != nil || string(b) != "1" {
		t.Errorf("ReadFile: %q, %v", b, err)
	}
	f.link(t, f.secret, "sub/y.json")
	_, err := ReadFile(filepath.Join(f.dir, "sub", "y.json"))
	wantLinkErr(t, err, filepath.Join(f.dir, "sub", "y.json"))
	f.link(t, f.outside, "ld")
	wantLinkErr(t, WriteFile(filepath.Join(f.dir, "ld", "z.json"), nil, 0o600), filepath.Join(f.dir, "ld"))
	f.untouched(t)
}

// TestListenUnix: a socket made below the directory is served there and
// given to its owner; a stale socket at the name is replaced; a linked
// directory on the way is refused (nothing is made where it points).
func TestListenUnix(t *testing.T) {
	modes(t, func(t *testing.T) {
		f := newFixture(t)
		uid, gid := os.Getuid(), os.Getgid()
		if uid == 0 {
			uid, gid = 4242, 4242
		}
		for i := 0; i < 2; i++ { // the second replaces the first's socket
			ln, err := f.d.ListenUnix("sub/s.sock", uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				if c, err := ln.Accept(); err == nil {
					c.Write([]byte("hi"))
					c.Close()
				}
			}()
			c, err := net.Dial("unix", filepath.Join(f.dir, "sub", "s.sock"))
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 2)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
				t.Errorf("read %q, %v from the socket", buf, err)
			}
			c.Close()
			ln.Close()
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(f.dir, "sub", "s.sock"), &st); err != nil {
				t.Fatalf("the socket is gone after Close: %v", err)
			}
			if int(st.Uid) != uid || int(st.Gid) != gid {
				t.Errorf("socket owned by %d:%d, want %d:%d", st.Uid, st.Gid, uid, gid)
			}
		}
		f.link(t, f.outside, "alias")
		if _, err := f.d.ListenUnix("alias/s.sock", uid, gid); err == nil {
			t.Errorf("listened through a linked directory")
		}
		if _, err := os.Lstat(filepath.Join(f.outside, "s.sock")); err == nil {
			t.Errorf("a socket was made where the link points")
		}
	})
}
