package disks

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/virtlauncher/virtlauncher/internal/podvolume"
)

// isoFile is one file of an ISO: a slash-separated path relative to the
// root, its content, and the permission bits recorded in Rock Ridge (0
// means 0644).
type isoFile = podvolume.File

// readSourceDir reads a config volume's directory into ISO files.
func readSourceDir(dir string) ([]isoFile, error) { return podvolume.ReadDir(dir) }

// writeISO builds an ISO 9660 image with Rock Ridge and Joliet extensions,
// labelled label, holding files, and puts it at final atomically.
//
// go-diskfs builds an ISO from a workspace directory; the workspace lives in
// final's directory (not /tmp) because the files may be secrets, and is
// removed whatever happens.
func (p *Preparer) writeISO(final, label string, files []isoFile) error {
	if len(label) > 32 {
		return fmt.Errorf("volume label %q is longer than the 32 characters ISO 9660 allows", label)
	}
	dir, base := filepath.Split(final)
	if err := p.mkdirAll(dir); err != nil {
		return fmt.Errorf("create directory for %s: %w", final, err)
	}
	ws, err := os.MkdirTemp(dir, "."+base+".ws-*")
	if err != nil {
		return fmt.Errorf("create ISO workspace for %s: %w", final, err)
	}
	defer os.RemoveAll(ws)
	// The workspace root becomes the ISO's root directory.
	if err := os.Chmod(ws, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeWorkspaceFile(ws, f); err != nil {
			return fmt.Errorf("ISO %s: %w", final, err)
		}
	}
	err = p.createAtomic(final, readOnlyMode, func(tmp *os.File) error {
		st := &stickyStorage{f: tmp}
		fsys, err := iso9660.Create(st, 0, 0, 2048, ws)
		if err != nil {
			return fmt.Errorf("create ISO %s: %w", final, err)
		}
		err = fsys.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: padLabel(label)})
		// go-diskfs ignores some write errors (padding, volume
		// descriptors) and flattens the others into strings; the sticky
		// storage remembers the first one, so ENOSPC stays visible.
		if st.err != nil {
			err = st.err
		}
		if err != nil {
			return fmt.Errorf("write ISO %s: %w", final, err)
		}
		// go-diskfs may end the image inside its last 2048-byte sector;
		// a CD-ROM only has whole sectors.
		fi, err := tmp.Stat()
		if err != nil {
			return err
		}
		if r := fi.Size() % 2048; r != 0 {
			if err := tmp.Truncate(fi.Size() + 2048 - r); err != nil {
				return fmt.Errorf("pad ISO %s: %w", final, err)
			}
		}
		return nil
	})
	if err == nil {
		p.log().Info("created ISO", "path", final, "label", label, "files", len(files))
	}
	return err
}

func writeWorkspaceFile(ws string, f isoFile) error {
	clean := path.Clean(f.Name)
	if clean == "." || strings.HasPrefix(clean, "../") || clean == ".." || path.IsAbs(clean) {
		return fmt.Errorf("file name %q is not a relative path", f.Name)
	}
	target := filepath.Join(ws, filepath.FromSlash(clean))
	parent := filepath.Dir(target)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	mode := f.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	if err := os.WriteFile(target, f.Data, mode); err != nil {
		return err
	}
	// WriteFile's mode is subject to the umask.
	return os.Chmod(target, mode)
}

// stickyStorage is a go-diskfs backend over an *os.File that remembers the
// first write error, because Finalize drops some of them (a full disk must not
// yield a silently truncated ISO).
type stickyStorage struct {
	f   *os.File
	err error
}

var _ backend.Storage = (*stickyStorage)(nil)

func (s *stickyStorage) Stat() (fs.FileInfo, error)              { return s.f.Stat() }
func (s *stickyStorage) Read(b []byte) (int, error)              { return s.f.Read(b) }
func (s *stickyStorage) ReadAt(b []byte, off int64) (int, error) { return s.f.ReadAt(b, off) }
func (s *stickyStorage) Seek(off int64, whence int) (int64, error) {
	return s.f.Seek(off, whence)
}

// Close does nothing: the file belongs to createAtomic.
func (s *stickyStorage) Close() error                            { return nil }
func (s *stickyStorage) Sys() (*os.File, error)                  { return s.f, nil }
func (s *stickyStorage) Writable() (backend.WritableFile, error) { return s, nil }
func (s *stickyStorage) Path() string                            { return s.f.Name() }

func (s *stickyStorage) WriteAt(b []byte, off int64) (int, error) {
	n, err := s.f.WriteAt(b, off)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

// padLabel pads a volume label with spaces to its 32-byte field, as ISO 9660
// requires; go-diskfs would pad it with NUL bytes, which some readers keep as
// part of the label.
func padLabel(label string) string {
	return label + strings.Repeat(" ", 32-len(label))
}
