// Package vmuser is the user a standalone VM runs as (its monitor,
// launcher, libvirt daemon and QEMU): the leased id as uid and gid, and
// what the kernel lets that user do to the host's files. vlctl, as root,
// asks it before it acts on a path the VM's user will use: a directory
// that user could change is refused (ResolveTrusted), and whether it can
// reach a file is the kernel's own answer (Test), ACLs and all.
package vmuser

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

// User is a user id with its primary group and supplementary groups.
type User struct {
	UID, GID int
	Name     string // for messages
	// Groups are supplementary groups: kvm, for /dev/kvm.
	Groups []uint32
}

// Leased is the VM's own user: the leased id as uid and gid, and the kvm
// group when the machine has one (QEMU opens /dev/kvm, 0660 root:kvm).
func Leased(l *uidpool.Lease) User {
	u := User{UID: int(l.ID), GID: int(l.ID), Name: fmt.Sprintf("uid %d", l.ID)}
	if g, err := user.LookupGroup("kvm"); err == nil {
		if gid, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
			u.Groups = []uint32{uint32(gid)}
		}
	}
	return u
}

// Credential runs a process as u.
func (u User) Credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: u.Groups}
}

// Test runs test(1) as u with a clean environment: the kernel's own
// answer, ACLs and all.
func (u User) Test(args ...string) bool {
	cmd := exec.Command("test", args...)
	if p, err := exec.LookPath("test"); err == nil {
		cmd.Path = p
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.Credential()}
	return cmd.Run() == nil
}

// CanReadWrite reports whether u can open path for reading and writing.
func (u User) CanReadWrite(path string) bool { return u.Test("-r", path, "-a", "-w", path) }

// FirstClosedDir is the first directory on the way to path that u cannot
// enter.
func (u User) FirstClosedDir(path string) string {
	dirs := []string{}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
		if d == "/" {
			break
		}
	}
	for _, d := range dirs {
		if !u.Test("-x", d) {
			return d
		}
	}
	return filepath.Dir(path)
}

// CanChange reports whether u can add, remove or rename entries of a
// directory with owner uid, group gid and permission bits perm (ACLs are
// not read).
func (u User) CanChange(uid, gid int, perm os.FileMode) bool {
	switch {
	case uid == u.UID:
		return true
	case gid == u.GID && perm&0o020 != 0:
		return true
	default:
		return perm&0o002 != 0
	}
}

// changeable is CanChange for the directory st.
func (u User) changeable(st os.FileInfo) bool {
	sys := st.Sys().(*syscall.Stat_t)
	return u.CanChange(int(sys.Uid), int(sys.Gid), st.Mode().Perm())
}

func owner(st os.FileInfo) int { return int(st.Sys().(*syscall.Stat_t).Uid) }

// ResolveTrusted resolves the symlinks in path, refusing any directory on
// the way (its own entries included) that u can change: root must not act
// on a path the VM's user could swap, or it would write or chown whatever
// that user pointed it at. In a sticky directory (/tmp) u may add names
// but not replace root's, so only an entry owned by u is refused there.
// The last element may be missing; a symlink as the last element is
// followed like the others.
func ResolveTrusted(path string, u User) (string, error) {
	if !filepath.IsAbs(path) {
		return "", errors.New("must be an absolute path")
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		dirSt, err := os.Stat(cur)
		if err != nil {
			return "", err
		}
		next := filepath.Join(cur, name)
		st, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) && len(rest) == 0 {
			if u.changeable(dirSt) {
				return "", fmt.Errorf("directory %s can be changed by user %s, which runs QEMU", cur, u.Name)
			}
			return next, nil
		}
		if err != nil {
			return "", err
		}
		if u.changeable(dirSt) && (dirSt.Mode()&os.ModeSticky == 0 || owner(st) == u.UID) {
			return "", fmt.Errorf("%s can be changed by user %s, which runs QEMU", next, u.Name)
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", errors.New("too many symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return cur, nil
}
