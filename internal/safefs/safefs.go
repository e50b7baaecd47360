// Package safefs is where root creates, writes, links, reads, chowns and
// removes files below a directory without ever following a symbolic link
// (root must never act through a path a less privileged user can change:
// that user could swap a component for a link to a file root would then
// overwrite or chown; docs/standalone.md, "What root does").
//
// Everything goes through a Dir: a directory opened once, with O_NOFOLLOW,
// by the caller, who vouches for the path up to it (a directory only root
// can change, or one root just made). Every name below it is resolved
// relative to that descriptor with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) where the kernel has it (Linux 5.6), else one
// component at a time with openat(O_NOFOLLOW). A symbolic link anywhere on
// the way, the last element included, is refused with an error naming it
// (errors.Is(err, ErrSymlink)); ".." and absolute names are refused before
// anything is looked at. Ownership and modes change through descriptors
// (fchown, fchownat with AT_SYMLINK_NOFOLLOW), never by path.
package safefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrSymlink is what a refused symbolic link's error matches (errors.Is).
var ErrSymlink = errors.New("is a symbolic link; refused, links are not followed here")

// linkError is a refused link; it also unwraps to the errno the kernel gave
// (ELOOP, ENOTDIR or EEXIST), so errors.Is(err, fs.ErrExist) still holds
// for an O_EXCL create that met a link.
type linkError struct{ errno error }

func (e linkError) Error() string        { return ErrSymlink.Error() }
func (e linkError) Is(target error) bool { return target == ErrSymlink }
func (e linkError) Unwrap() error        { return e.errno }

// Dir is an open directory that names below it are resolved against.
type Dir struct {
	fd   int
	path string // for messages and Join only: never resolved again
}

// Open opens the directory path. Its last element must not be a symbolic
// link; the elements before it are the caller's to trust.
func Open(path string) (*Dir, error) {
	path = filepath.Clean(path)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) && isLink(unix.AT_FDCWD, path) {
			err = linkError{err}
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: path}, nil
}

// Path is the path d was opened with.
func (d *Dir) Path() string { return d.path }

// Join is the path of name below d, for messages and for handing to
// others (who then resolve it with their own rights).
func (d *Dir) Join(name string) string { return filepath.Join(d.path, name) }

// Close closes d.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// Stat describes d itself.
func (d *Dir) Stat() (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return st, &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return st, nil
}

// Chown changes d's own owner, through its descriptor.
func (d *Dir) Chown(uid, gid int) error {
	if err := unix.Fchown(d.fd, uid, gid); err != nil {
		return &fs.PathError{Op: "chown", Path: d.path, Err: err}
	}
	return nil
}

// Chmod changes d's own mode, through its descriptor.
func (d *Dir) Chmod(mode fs.FileMode) error {
	if err := unix.Fchmod(d.fd, uint32(mode.Perm())); err != nil {
		return &fs.PathError{Op: "chmod", Path: d.path, Err: err}
	}
	return nil
}

// forceFallback makes every lookup walk component by component, so tests
// cover the path kernels without openat2 take.
var forceFallback = false

// haveOpenat2 reports whether openat2 works here: it may be missing (Linux
// before 5.6) or refused by a seccomp filter (EPERM or ENOSYS), which a
// probe tells once.
var haveOpenat2 = sync.OnceValue(func() bool {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, ".", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// clean checks that name stays below the directory: relative, no "..".
// "." is the directory itself.
func clean(name string) (string, error) {
	c := filepath.Clean(name)
	if name == "" || filepath.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q: not a name below the directory", name)
	}
	return c, nil
}

// openat opens name below d with flags (O_NOFOLLOW and O_CLOEXEC added):
// no symbolic link is followed anywhere on the way.
func (d *Dir) openat(op, name string, flags int, mode uint32) (int, error) {
	c, err := clean(name)
	if err != nil {
		return -1, &fs.PathError{Op: op, Path: d.path, Err: err}
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	var fd int
	if haveOpenat2() && !forceFallback {
		how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		if flags&unix.O_CREAT != 0 || flags&unix.O_TMPFILE == unix.O_TMPFILE {
			how.Mode = uint64(mode)
		}
		for i := 0; ; i++ {
			// EAGAIN: a rename raced the lookup; the kernel asks to retry.
			fd, err = unix.Openat2(d.fd, c, how)
			if !errors.Is(err, unix.EAGAIN) || i == 10 {
				break
			}
		}
	} else {
		fd, err = d.walkOpen(c, flags, mode)
	}
	if err != nil {
		return -1, d.describe(op, c, err)
	}
	return fd, nil
}

// walkOpen is openat for kernels without openat2: every directory on the
// way is opened with O_NOFOLLOW, then the last element relative to it.
func (d *Dir) walkOpen(c string, flags int, mode uint32) (int, error) {
	comps := strings.Split(c, "/")
	cur := d.fd
	for _, comp := range comps[:len(comps)-1] {
		next, err := unix.Openat(cur, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != d.fd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	fd, err := unix.Openat(cur, comps[len(comps)-1], flags, mode)
	if cur != d.fd {
		unix.Close(cur)
	}
	return fd, err
}

// describe turns a failed lookup of c into an error naming the path; when
// a symbolic link is what stopped it, that link is named.
func (d *Dir) describe(op, c string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EXDEV) {
		comps := strings.Split(c, "/")
		for i := range comps {
			p := strings.Join(comps[:i+1], "/")
			if isLinkBelow(d.fd, p) {
				return &fs.PathError{Op: op, Path: d.Join(p), Err: linkError{err}}
			}
		}
	}
	return &fs.PathError{Op: op, Path: d.Join(c), Err: err}
}

// isLinkBelow says whether p below dirfd is a symbolic link, looking one
// component at a time without following any.
func isLinkBelow(dirfd int, p string) bool {
	comps := strings.Split(p, "/")
	cur := dirfd
	defer func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}()
	for _, comp := range comps[:len(comps)-1] {
		next, err := unix.Openat(cur, comp, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		cur = next
	}
	return isLink(cur, comps[len(comps)-1])
}

func isLink(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// OpenFile opens name below d like os.OpenFile, never following a link.
// With O_CREAT|O_EXCL an existing entry of any kind, a link included, is an
// error.
func (d *Dir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := d.openat("open", name, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), d.Join(name)), nil
}

// OpenDir opens the directory name below d.
func (d *Dir) OpenDir(name string) (*Dir, error) {
	fd, err := d.openat("open", name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return &Dir{fd: fd, path: d.Join(name)}, nil
}

// parent opens the directory holding name (d itself for a plain name) and
// returns it with name's last element. Call done when finished.
func (d *Dir) parent(op, name string) (pfd int, base string, done func(), err error) {
	c, err := clean(name)
	if err != nil || c == "." {
		if err == nil {
			err = fmt.Errorf("%q: names the directory itself", name)
		}
		return -1, "", nil, &fs.PathError{Op: op, Path: d.path, Err: err}
	}
	dir, base := filepath.Split(c)
	if dir == "" {
		return d.fd, base, func() {}, nil
	}
	fd, err := d.openat(op, strings.TrimSuffix(dir, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", nil, err
	}
	return fd, base, func() { unix.Close(fd) }, nil
}

// Mkdir makes the directory name below d (mode perm, less the umask).
func (d *Dir) Mkdir(name string, perm fs.FileMode) error {
	pfd, base, done, err := d.parent("mkdir", name)
	if err != nil {
		return err
	}
	defer done()
	if err := unix.Mkdirat(pfd, base, uint32(perm.Perm())); err != nil {
		return d.describe("mkdir", filepath.Clean(name), err)
	}
	return nil
}

// MkdirAll makes name and any missing directory above it below d (mode
// perm, less the umask). An existing element must be a directory, not a
// link to one.
func (d *Dir) MkdirAll(name string, perm fs.FileMode) error {
	c, err := clean(name)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: d.path, Err: err}
	}
	if c == "." {
		return nil
	}
	cur := d.fd
	defer func() {
		if cur != d.fd {
			unix.Close(cur)
		}
	}()
	comps := strings.Split(c, "/")
	for i, comp := range comps {
		if err := unix.Mkdirat(cur, comp, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
			return d.describe("mkdir", strings.Join(comps[:i+1], "/"), err)
		}
		next, err := unix.Openat(cur, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return d.describe("mkdir", strings.Join(comps[:i+1], "/"), err)
		}
		if cur != d.fd {
			unix.Close(cur)
		}
		cur = next
	}
	return nil
}

// Symlink makes name below d a symbolic link to target. Nothing is
// resolved through the new link; an existing entry is an error.
func (d *Dir) Symlink(target, name string) error {
	pfd, base, done, err := d.parent("symlink", name)
	if err != nil {
		return err
	}
	defer done()
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return &fs.PathError{Op: "symlink", Path: d.Join(name), Err: err}
	}
	return nil
}

// Remove removes name below d: a file, a link (not what it points to) or
// an empty directory.
func (d *Dir) Remove(name string) error {
	pfd, base, done, err := d.parent("remove", name)
	if err != nil {
		return err
	}
	defer done()
	err = unix.Unlinkat(pfd, base, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: d.Join(name), Err: err}
	}
	return nil
}

// ListenUnix listens on a unix socket at name below d, replacing a socket
// left there, and gives it to uid:gid. The socket is bound through the
// opened parent directory (/proc/self/fd), so no link on the way is
// followed even when another user owns that directory and renames things
// in it meanwhile; the owner change does not follow a link either. The
// listener does not remove the socket on Close: Remove does, by name.
func (d *Dir) ListenUnix(name string, uid, gid int) (*net.UnixListener, error) {
	pfd, base, done, err := d.parent("listen", name)
	if err != nil {
		return nil, err
	}
	defer done()
	var st unix.Stat_t
	if unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
		unix.Unlinkat(pfd, base, 0)
	}
	addr := &net.UnixAddr{Net: "unix", Name: "/proc/self/fd/" + strconv.Itoa(pfd) + "/" + base}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return nil, &fs.PathError{Op: "listen", Path: d.Join(name), Err: err}
	}
	ln.SetUnlinkOnClose(false)
	if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		ln.Close()
		unix.Unlinkat(pfd, base, 0)
		return nil, &fs.PathError{Op: "chown", Path: d.Join(name), Err: err}
	}
	return ln, nil
}

// WriteFile replaces name below d with a file holding data, mode perm
// (exactly: the umask does not apply), atomically: a temporary file in the
// same directory renamed over it. Whatever was at name (a link included)
// is replaced, never written through.
func (d *Dir) WriteFile(name string, data []byte, perm fs.FileMode) error {
	pfd, base, done, err := d.parent("write", name)
	if err != nil {
		return err
	}
	defer done()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return fmt.Errorf("write %s: %w", d.Join(name), err)
	}
	tmp := ".tmp-" + base + "-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "write", Path: d.Join(name), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(data)
	err = errors.Join(werr, f.Chmod(perm.Perm()), f.Close())
	if err == nil {
		err = unix.Renameat(pfd, tmp, pfd, base)
	}
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return &fs.PathError{Op: "write", Path: d.Join(name), Err: err}
	}
	return nil
}

// ReadFile reads the regular file name below d. A FIFO or device there is
// refused without blocking.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	f, err := d.OpenRegular(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.Join(name), err)
	}
	return b, nil
}

// OpenRegular opens the regular file name below d for reading; anything
// else there (a FIFO, a device, a directory) is refused, without blocking.
func (d *Dir) OpenRegular(name string) (*os.File, error) {
	f, err := d.OpenFile(name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: d.Join(name), Err: fmt.Errorf("not a regular file (%v)", st.Mode().Type())}
	}
	return f, nil
}

// ChownTree hands the tree at name below d ("." for d itself) to uid:gid:
// directories through descriptors opened without following links, other
// entries with fchownat(AT_SYMLINK_NOFOLLOW), so a link is changed itself
// and never followed. A directory is changed after everything below it,
// so the new owner can change no directory whose entries are still to be
// done. A non-directory with more than one hard link is refused: it may
// be a file outside the tree.
func (d *Dir) ChownTree(name string, uid, gid int) error {
	sub, err := d.OpenDir(name)
	if err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	defer sub.Close()
	return sub.chownTree(uid, gid, 0)
}

// maxDepth bounds ChownTree's recursion (the kernel's PATH_MAX allows no
// deeper tree of one-letter names either).
const maxDepth = 2048

func (d *Dir) chownTree(uid, gid, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("chown %s: tree deeper than %d", d.path, maxDepth)
	}
	// A second descriptor for reading: ReadDir consumes it.
	rfd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "chown", Path: d.path, Err: err}
	}
	rf := os.NewFile(uintptr(rfd), d.path)
	names, err := rf.Readdirnames(-1)
	rf.Close()
	if err != nil {
		return fmt.Errorf("chown: read %s: %w", d.path, err)
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(d.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "chown", Path: d.Join(n), Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := d.OpenDir(n)
			if err != nil {
				return fmt.Errorf("chown: %w", err)
			}
			err = sub.chownTree(uid, gid, depth+1)
			sub.Close()
			if err != nil {
				return err
			}
			continue
		}
		if st.Nlink > 1 {
			return &fs.PathError{Op: "chown", Path: d.Join(n), Err: fmt.Errorf("has %d hard links; refused, it may be a file outside the tree", st.Nlink)}
		}
		if err := unix.Fchownat(d.fd, n, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "chown", Path: d.Join(n), Err: err}
		}
	}
	return d.Chown(uid, gid)
}

// WriteFile writes path like Dir.WriteFile: path's directory is opened
// (its last element must not be a link) and path's last element replaced
// atomically, never written through.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	d, err := Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.WriteFile(filepath.Base(path), data, perm)
}

// Remove removes path like Dir.Remove: path's directory is opened (its
// last element must not be a link) and its last element removed, a link
// as a link.
func Remove(path string) error {
	d, err := Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Remove(filepath.Base(path))
}

// ReadFile reads the regular file path; neither it nor its directory may
// be a link.
func ReadFile(path string) ([]byte, error) {
	d, err := Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadFile(filepath.Base(path))
}

// ChownTree opens path (its last element must not be a link) and hands its
// tree to uid:gid like Dir.ChownTree.
func ChownTree(path string, uid, gid int) error {
	d, err := Open(path)
	if err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	defer d.Close()
	return d.chownTree(uid, gid, 0)
}
