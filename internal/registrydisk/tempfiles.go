package registrydisk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A pull writes its disk (and a reference its name) to a temporary file in
// the cache and renames it into place when complete. A pull that is killed
// (SIGKILL, a crash, the machine going down) leaves that file behind; the
// next pull removes it. Another pull may be writing its own temporary file
// at the same time, in this process or another vlctl run: each pull holds
// an flock on its file for as long as the file has its temporary name, so
// a file whose lock can be taken belongs to a pull that is gone. A file is
// created and locked while the cache directory's shared lock is held, and
// the sweep takes the directory's exclusive lock, so it never sees a file
// in the instant between its creation and its lock.

const (
	pullTempPrefix = ".pull-"
	refTempPrefix  = ".ref-"
)

// lockPoll is how often a lock that is busy is tried again.
const lockPoll = 10 * time.Millisecond

// createTemp makes a new temporary file in the cache (0600, root's) and
// locks it; commit or discard ends it.
func (d *cacheDir) createTemp(ctx context.Context, prefix string) (*os.File, error) {
	// A description of its own for the directory's lock: closing it lets
	// the lock go.
	lf, err := d.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	if err := flockWait(ctx, lf, unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("lock %s: %w", d.Path(), err)
	}
	var f *os.File
	for try := 0; ; try++ {
		var rnd [8]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, err
		}
		f, err = d.OpenFile(prefix+hex.EncodeToString(rnd[:]), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err == nil || !errors.Is(err, fs.ErrExist) || try == 10 {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		d.discard(f)
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}

// commit makes the temporary file f the cache's file name, 0600, when err
// (what writing it gave) is nil; otherwise, or when that fails, f is
// removed and the error returned. With replace false, a file already at
// name stays: a disk is the same bytes whoever pulled it, and a run may
// hold an ACL entry on the one there. Both names are resolved in the
// cache's descriptor.
func (d *cacheDir) commit(f *os.File, err error, name string, replace bool) error {
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		// Renamed while its lock is held: a sweep never sees it unlocked
		// under its temporary name.
		dfd, tmp := int(d.f.Fd()), filepath.Base(f.Name())
		if replace {
			err = unix.Renameat(dfd, tmp, dfd, name)
		} else if err = unix.Renameat2(dfd, tmp, dfd, name, unix.RENAME_NOREPLACE); errors.Is(err, unix.EEXIST) {
			d.discard(f)
			return nil
		} else if errors.Is(err, unix.EINVAL) {
			// A file system without RENAME_NOREPLACE.
			err = unix.Renameat(dfd, tmp, dfd, name)
		}
		if err != nil {
			err = &fs.PathError{Op: "rename", Path: d.Join(name), Err: err}
		}
	}
	if err != nil {
		d.discard(f)
		return err
	}
	return f.Close()
}

// discard removes the temporary file f and closes it.
func (d *cacheDir) discard(f *os.File) {
	d.Remove(filepath.Base(f.Name()))
	f.Close()
}

// flockWait takes the flock how of f, waiting for it until ctx ends.
func flockWait(ctx context.Context, f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// sweep removes the temporary files of pulls that are gone from the cache
// directory d, and closes to other users the files an earlier version
// made readable by all. While another pull is creating its temporary file
// it does nothing: the next pull sweeps.
func sweep(d *os.File) error {
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil
		}
		return fmt.Errorf("lock: %w", err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN)
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, pullTempPrefix), strings.HasPrefix(n, refTempPrefix):
			errs = append(errs, removeStale(d, n))
		case strings.HasSuffix(n, ".img"), strings.HasSuffix(n, ".ref"):
			errs = append(errs, closeToOthers(d, n))
		}
	}
	return errors.Join(errs...)
}

// removeStale removes the temporary file n of d when no pull holds it.
func removeStale(d *os.File, n string) error {
	fd, err := unix.Openat(int(d.Fd()), n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return nil // gone, or a link: not one a pull made
	}
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil // a live pull's
		}
		return fmt.Errorf("%s: %w", n, err)
	}
	var open, now unix.Stat_t
	if err := unix.Fstat(fd, &open); err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	if err := unix.Fstatat(int(d.Fd()), n, &now, unix.AT_SYMLINK_NOFOLLOW); err != nil || open.Dev != now.Dev || open.Ino != now.Ino {
		return nil // renamed or replaced meanwhile: not what was locked
	}
	if open.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	if err := unix.Unlinkat(int(d.Fd()), n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove a killed pull's %s: %w", n, err)
	}
	return nil
}

// closeToOthers takes the group's and others' permissions off the file n
// of d, which an earlier version left readable by all (0644). A file with
// a run's ACL entry has its mask in the group bits and nothing for others:
// it is left as it is.
func closeToOthers(d *os.File, n string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("%s: %w", n, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o007 == 0 {
		return nil
	}
	fd, err := unix.Openat(int(d.Fd()), n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", n, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fmt.Errorf("close %s to other users: %w", n, err)
	}
	return nil
}
