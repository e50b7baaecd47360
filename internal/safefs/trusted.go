package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TrustError is a directory OpenTrusted refuses: which one, what is wrong
// with it and what to do about it.
type TrustError struct {
	Path    string // the path asked for
	Dir     string // the directory on the way that is refused
	Problem string
	Fix     string
}

func (e *TrustError) Error() string {
	if e.Dir == e.Path {
		return fmt.Sprintf("%s %s; %s", e.Dir, e.Problem, e.Fix)
	}
	return fmt.Sprintf("%s: %s %s; %s", e.Path, e.Dir, e.Problem, e.Fix)
}

// OpenTrusted opens the directory path, one that only root (or, for a
// caller that is not root, that caller) can change, and makes it first
// when it is missing: the fixed paths root uses again and again (records,
// leases, caches), where another user must never get to put or swap what
// root reads, runs or writes.
//
// Every directory from / down is opened relative to the one above it,
// without following a link, and checked through its descriptor, so what
// is checked is what is used:
//   - path itself must be a directory (not a link to one) owned by root and
//     not writable by its group or others; it is made with mode perm when
//     missing, and an existing one's mode is set to perm;
//   - each directory above it must be owned by root and not writable by
//     group or others, or be sticky (/tmp, /var/tmp: others may add
//     entries there but cannot rename or remove root's). Missing ones are
//     made 0755.
//
// An ACL that lets another user write shows in the group bits (they are
// the ACL's mask), so it is refused too. Anything else is a *TrustError
// naming the directory, what is wrong and how to fix it; nothing is made
// or changed below a directory that is refused.
func OpenTrusted(path string, perm fs.FileMode) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, &TrustError{Path: path, Dir: path, Problem: "is not an absolute path", Fix: "give one starting with /"}
	}
	path = filepath.Clean(path)
	cur, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	comps := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if path == "/" {
		comps = nil
	}
	curPath := "/"
	for i := 0; ; i++ {
		leaf := i == len(comps)
		if err := checkTrusted(cur, path, curPath, leaf); err != nil {
			unix.Close(cur)
			return nil, err
		}
		if leaf {
			break
		}
		next, nextPath, err := openOrMake(cur, curPath, comps[i], path, i == len(comps)-1, perm)
		unix.Close(cur)
		if err != nil {
			return nil, err
		}
		cur, curPath = next, nextPath
	}
	d := &Dir{fd: cur, path: path}
	st, err := d.Stat()
	if err == nil && fs.FileMode(st.Mode).Perm() != perm.Perm() {
		err = d.Chmod(perm)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openOrMake opens the directory name below dirfd (at dirPath), making it
// when missing: mode perm when it is the last one (leaf), else 0755.
func openOrMake(dirfd int, dirPath, name, path string, leaf bool, perm fs.FileMode) (int, string, error) {
	p := filepath.Join(dirPath, name)
	mode := uint32(0o755)
	if leaf {
		mode = uint32(perm.Perm())
	}
	made := false
	for try := 0; ; try++ {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil && made && !leaf {
			// Whatever root's umask: the directories on the way are
			// 0755, as MkdirAll's would be with the usual one.
			err = unix.Fchmod(fd, mode)
			if err != nil {
				unix.Close(fd)
				return -1, "", &fs.PathError{Op: "chmod", Path: p, Err: err}
			}
		}
		if err == nil {
			return fd, p, nil
		}
		switch {
		case errors.Is(err, unix.ENOENT) && try < 3:
			// Made here, by root, through the checked directory above; an
			// EEXIST is another maker's (checked like any existing one).
			err := unix.Mkdirat(dirfd, name, mode)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, "", &fs.PathError{Op: "mkdir", Path: p, Err: err}
			}
			made = err == nil
			continue
		case (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) && isLink(dirfd, name):
			return -1, "", &TrustError{Path: path, Dir: p, Problem: "is a symbolic link (links are not followed here)",
				Fix: "remove the link and let root make the directory"}
		case errors.Is(err, unix.ENOTDIR):
			return -1, "", &TrustError{Path: path, Dir: p, Problem: "is not a directory", Fix: "remove it or choose another path"}
		}
		return -1, "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
}

// checkTrusted refuses the open directory fd (at p) when a user other
// than root (or the caller) could change its entries: by owning it, or
// by write permission for its group or others, which a sticky directory
// above the leaf may have.
func checkTrusted(fd int, path, p string, leaf bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	fix := "remove it (root makes it again) or choose another path"
	if !leaf {
		fix = "choose a path whose directories only root can change"
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return &TrustError{Path: path, Dir: p, Fix: fix,
			Problem: fmt.Sprintf("is owned by %s, not root, who can change it", describeUID(st.Uid))}
	}
	writable := st.Mode&0o022 != 0
	if writable && (leaf || st.Mode&unix.S_ISVTX == 0) {
		return &TrustError{Path: path, Dir: p, Fix: fix,
			Problem: fmt.Sprintf("is writable by users other than its owner (mode %04o)", st.Mode&0o7777)}
	}
	return nil
}

// describeUID is "uid N (name)", or "uid N" for an id no account has.
func describeUID(uid uint32) string {
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		return "uid " + s + " (" + u.Username + ")"
	}
	return "uid " + s
}
