package userstorage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// Disk is a user's file or device, open, for the run.
type Disk struct {
	Spec
	real string // the resolved path
	// base and rel: see place.
	base, rel string
	f         *os.File
	block     bool
	created   bool
	grant     *Grant
}

// place is where check found a piece of user storage.
type place struct {
	real    string // the resolved path
	missing bool   // it is missing and is to be created
	// base, for a hostDisk, is its allowed directory, resolved, and rel
	// the file's path below it: the file is opened, created and removed
	// through base's descriptor without following any link, so a link put
	// on the way after the check cannot lead root out of the directory.
	base, rel string
}

// openFile opens (or creates) the file at p, never following a link at
// its last element nor, below base, anywhere.
func (p place) openFile(flag int, perm os.FileMode) (*os.File, error) {
	if p.base == "" {
		return os.OpenFile(p.real, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	}
	dir, err := safefs.Open(p.base)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.OpenFile(p.rel, flag, perm)
}

// remove removes the file at p, as openFile finds it.
func (p place) remove() error {
	if p.base == "" {
		return os.Remove(p.real)
	}
	dir, err := safefs.Open(p.base)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Remove(p.rel)
}

// check resolves the user's path and tells whether open would fail for a
// reason it can see without changing anything: a hostDisk outside its
// allowed directory or not the user's to give, a missing file that is not
// to be created, or a directory QEMU's user cannot enter.
func (s Spec) check(o vmuser.User) (place, error) {
	real, err := vmuser.ResolveTrusted(s.path, o)
	if err != nil {
		return place{}, fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	p := place{real: real}
	if s.kind == hostDiskFile {
		if p.base, p.rel, err = s.confine(real, o); err != nil {
			return place{}, err
		}
	}
	st, err := os.Lstat(real)
	switch {
	case err == nil:
		if s.kind == hostDiskFile {
			return p, s.checkHostFile(st.Mode(), st.Sys().(*syscall.Stat_t))
		}
		return p, nil
	case !errors.Is(err, fs.ErrNotExist):
		return place{}, fmt.Errorf("%s %s: %w", s.field, s.path, err)
	case s.create > 0:
		if dir := filepath.Dir(real); !o.Test("-x", dir) {
			closed := o.FirstClosedDir(real)
			return place{}, fmt.Errorf("%s %s: QEMU runs as user %s, which could not reach it: directory %s is closed to it (create it elsewhere, or: setfacl -m u:%s:x %s)", s.field, s.path, o.Name, closed, o.Name, closed)
		}
		p.missing = true
		return p, nil
	case s.kind == pvcStorage && s.sizeFrom == "":
		return place{}, fmt.Errorf("%s %s: does not exist; give the size to create it with: --volume %s", s.field, s.path, strings.TrimPrefix(s.field, "--volume ")+"="+s.path+",size=10Gi")
	default:
		return place{}, fmt.Errorf("%s %s: does not exist (type %s uses an existing file)", s.field, s.path, v1.HostDiskExists)
	}
}

// confine checks that real, the hostDisk's resolved path, lies below its
// allowed directory, resolved the same way (a link on the way may lead
// anywhere, so what counts is where it leads), and returns that directory
// and the path below it.
func (s Spec) confine(real string, o vmuser.User) (base, rel string, err error) {
	if s.allowed == "" {
		return "", "", fmt.Errorf("%s %s (volume %q) is not under a directory allowed with --allow-host-path", s.field, s.path, s.volume)
	}
	base, err = vmuser.ResolveTrusted(s.allowed, o)
	if err != nil {
		return "", "", fmt.Errorf("--allow-host-path %s: %w", s.allowed, err)
	}
	if st, err := os.Lstat(base); err != nil {
		return "", "", fmt.Errorf("--allow-host-path %s: %w", s.allowed, err)
	} else if !st.IsDir() {
		return "", "", fmt.Errorf("--allow-host-path %s: not a directory", s.allowed)
	}
	if !below(real, base) {
		return "", "", fmt.Errorf("%s %s (volume %q) leads to %s, outside %s, the directory allowed with --allow-host-path: a symbolic link on the way leaves it", s.field, s.path, s.volume, real, s.allowed)
	}
	rel, err = filepath.Rel(base, real)
	return base, rel, err
}

// checkHostFile refuses, for a hostDisk, what is not a disk image of the
// user's: anything but a regular file with one link (a device, FIFO or
// socket is never opened), and a file of a user other than root or the
// one who ran vlctl.
func (s Spec) checkHostFile(mode fs.FileMode, sys *syscall.Stat_t) error {
	switch {
	case !mode.IsRegular():
		return fmt.Errorf("%s %s: not a regular file (%s)", s.field, s.path, fileType(mode))
	case sys.Nlink > 1:
		return fmt.Errorf("%s %s: has %d hard links; vlctl grants QEMU access only to a file with one", s.field, s.path, sys.Nlink)
	case sys.Uid != 0 && int(sys.Uid) != s.owner:
		who := "root (or of the user running vlctl with sudo)"
		if s.owner != 0 {
			who = fmt.Sprintf("root or uid %d, who ran vlctl", s.owner)
		}
		return fmt.Errorf("%s %s: belongs to uid %d; a manifest's hostDisk may only use a file of %s", s.field, s.path, sys.Uid, who)
	}
	return nil
}

// fileType names the kind of a file that is not a regular one.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	default:
		return "not a regular file"
	}
}

// Open resolves, checks and (when asked and missing) creates the user's
// storage, and makes sure user o can read and write it. Nothing is left
// changed when it fails.
func (s Spec) Open(o vmuser.User, log func(string, ...any)) (_ *Disk, err error) {
	d := &Disk{Spec: s}
	p, err := s.check(o)
	if err != nil {
		return nil, err
	}
	d.real, d.base, d.rel = p.real, p.base, p.rel
	var f *os.File
	if p.missing {
		if f, err = s.createFile(p, log); err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.field, s.path, err)
		}
		d.created = true
	} else if f, err = p.openFile(os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
		// O_NONBLOCK: a block device opens at once; the fd is only used
		// for fstat and ACLs.
		return nil, fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	d.f = f
	defer func() {
		if err != nil {
			d.RemoveCreated()
			d.Release(log)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sys := st.Sys().(*syscall.Stat_t)
	switch {
	case s.kind == hostDiskFile:
		// Again on what was opened: the path may have changed since
		// check looked.
		if err := s.checkHostFile(st.Mode(), sys); err != nil {
			return nil, err
		}
	case st.Mode().IsRegular():
		if sys.Nlink > 1 {
			return nil, fmt.Errorf("%s %s: has %d hard links; vlctl grants QEMU access only to a file with one", s.field, s.path, sys.Nlink)
		}
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		d.block = true
	default:
		return nil, fmt.Errorf("%s %s: not a regular file or block device", s.field, s.path)
	}
	if st.Mode().IsRegular() && !d.created && s.create > 0 && st.Size() < s.create {
		log("vlctl: %s %s is %d bytes, less than the %d of %s; used as it is\n", s.field, s.path, st.Size(), s.create, s.sizeFrom)
	}
	if !o.CanReadWrite(d.real) {
		g, err := GrantAccess(f, uint32(o.UID), 6)
		if err != nil {
			return nil, fmt.Errorf("%s %s: give user %s (QEMU) read and write access: %w", s.field, s.path, o.Name, err)
		}
		d.grant = g
		if !o.CanReadWrite(d.real) {
			dir := o.FirstClosedDir(d.real)
			return nil, fmt.Errorf("%s %s: QEMU runs as user %s, which cannot reach it: directory %s is closed to it (move the file, or: setfacl -m u:%s:x %s)", s.field, s.path, o.Name, dir, o.Name, dir)
		}
	}
	return d, nil
}

// createFile makes a sparse raw image of the asked size, as KubeVirt's
// host-disk code does: a PVC image that does not fit in the free space
// (less a reserve) is made smaller when it falls short by at most 10 %.
func (s Spec) createFile(p place, log func(string, ...any)) (*os.File, error) {
	const reserve = 131072 // KubeVirt's default minimumReservePVCBytes
	const toleration = 10  // and lessPVCSpaceToleration (percent)
	size := s.create
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(p.real), &st); err != nil {
		return nil, fmt.Errorf("free space: %w", err)
	}
	avail := int64(st.Bavail)*st.Bsize - reserve
	if size > avail {
		if !s.tolerate || size*(100-toleration)/100 > avail {
			return nil, fmt.Errorf("%s asks for %d bytes, more than the %d free in %s", s.sizeFrom, size, avail, filepath.Dir(p.real))
		}
		log("vlctl: %s: only %d of the %d bytes of %s are free; made it smaller (within KubeVirt's 10 %% toleration)\n", s.path, avail, size, s.sizeFrom)
		size = avail
	}
	f, err := p.openFile(os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		p.remove()
		return nil, err
	}
	log("vlctl: created %s (%d bytes, sparse raw, blank) for %s\n", s.path, size, s.sizeFrom)
	return f, nil
}

// Release undoes what Open did: the ACL entry, and a file it created
// (only while nothing was written to it: the guest never ran).
func (d *Disk) Release(log func(string, ...any)) {
	if d.f == nil {
		return
	}
	if d.grant != nil {
		if same, err := d.grant.Undo(); err != nil || !same {
			log("vlctl: %s: left its ACL as it is now (the run's entry changed during the run, or %v)\n", d.path, err)
		}
		d.grant = nil
	}
	d.f.Close()
	d.f = nil
}

// recordedGrant is the ACL entry the run added to the file, as the run's
// record keeps it for vlctl gc.
func (d *Disk) recordedGrant() (runrecord.Grant, bool) {
	if d.grant == nil || d.f == nil {
		return runrecord.Grant{}, false
	}
	fi, err := d.f.Stat()
	if err != nil {
		return runrecord.Grant{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return runrecord.Grant{}, false
	}
	g := d.grant
	return runrecord.Grant{Path: d.real, Dev: uint64(st.Dev), Ino: st.Ino,
		Before: g.Before, After: g.After}, true
}

// RemoveCreated deletes the file Open created, when it is still the same
// file.
func (d *Disk) RemoveCreated() {
	if !d.created {
		return
	}
	if d.f != nil {
		st, err1 := d.f.Stat()
		now, err2 := os.Lstat(d.real)
		if err1 != nil || err2 != nil || !os.SameFile(st, now) {
			return
		}
	}
	place{real: d.real, base: d.base, rel: d.rel}.remove()
	d.created = false
}

// Link is where the launcher looks for this volume in layout l.
func (d *Disk) Link(l layout.Layout) (string, error) {
	switch {
	case d.hotplug && d.block:
		return l.HotplugBlock(d.volume), nil
	case d.hotplug:
		return l.HotplugFile(d.volume), nil
	case d.kind == hostDiskFile:
		return l.HostDisk(d.volume, d.path)
	case d.block:
		return l.BlockDevice(d.volume), nil
	default:
		return l.PVCDisk(d.volume), nil
	}
}

// Path is the user's path as given, Real the resolved one (the file the
// launcher's link leads to).
func (d *Disk) Path() string { return d.path }
func (d *Disk) Real() string { return d.real }

// File is the disk, open (nil once released).
func (d *Disk) File() *os.File { return d.f }

// Created reports whether Open created the file (and RemoveCreated has
// not removed it).
func (d *Disk) Created() bool { return d.created }

func openNoFollow(path string) (*os.File, error) {
	// O_NONBLOCK: a block device opens at once; the fd is only used for
	// fstat and ACLs.
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
}
