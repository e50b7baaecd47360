package disks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const (
	dirMode       os.FileMode = 0o750
	imageMode     os.FileMode = 0o600 // images QEMU writes
	readOnlyMode  os.FileMode = 0o640 // ISOs QEMU only reads
	tempPrefixFmt             = ".%s.tmp-*"
)

// mkdirAll creates dir and its missing parents with dirMode, giving the ones
// it creates to the owner. Existing directories are left as they are.
func (p *Preparer) mkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := p.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	// Mkdir is subject to the umask; set the mode we mean.
	if err := os.Chmod(dir, dirMode); err != nil {
		return err
	}
	return p.chown(dir)
}

func (p *Preparer) chown(path string) error {
	if p.Owner == nil {
		return nil
	}
	if err := os.Lchown(path, p.Owner.UID, p.Owner.GID); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", path, p.Owner.UID, p.Owner.GID, err)
	}
	return nil
}

// exists reports whether path exists (without following a final symlink).
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// createAtomic makes final by letting fill write a temporary file in the same
// directory, then syncing it, setting mode and owner, and renaming it into
// place. On any error the temporary file is removed, so final either does not
// change or is complete. An existing final is replaced.
func (p *Preparer) createAtomic(final string, mode os.FileMode, fill func(tmp *os.File) error) (err error) {
	dir, base := filepath.Split(final)
	if err := p.mkdirAll(dir); err != nil {
		return fmt.Errorf("create directory for %s: %w", final, err)
	}
	f, err := os.CreateTemp(dir, fmt.Sprintf(tempPrefixFmt, base))
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", final, err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	// The fill function may have had an external program write the file by
	// name; sync through our descriptor, which reaches the same inode.
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err = p.chown(tmp); err != nil {
		return err
	}
	err = f.Close()
	f = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, final); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, final, err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename durable. Failure is not an error: some file systems
// refuse fsync on directories, and the file itself is already synced.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
