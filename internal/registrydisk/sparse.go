package registrydisk

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The disk is written with its runs of zeros left as holes: a raw disk is
// mostly zeros, and a layer that expands to gigabytes of them (a gzip
// bomb) then takes no space. Data that is not zeros is written; every
// checkEvery bytes of it, the file system's free space is looked at, and
// the extraction stops before it leaves less than minFree.

const (
	holeBlock  = 4096
	checkEvery = 256 << 20
	minFree    = 1 << 30
)

// sparseWriter writes a stream to a new (all holes) file from offset 0,
// skipping the blocks that are all zeros; the caller truncates the file
// to its size at the end, so trailing holes count.
type sparseWriter struct {
	f         *os.File
	off       int64
	sinceFree int64 // bytes written since free space was last looked at
}

func (w *sparseWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		// The run of blocks up to the next change between zeros and data,
		// the first one cut at a block boundary of the file.
		first := holeBlock - int(w.off%holeBlock)
		zero := allZero(p[:min(first, len(p))])
		n := min(first, len(p))
		for n < len(p) {
			next := min(n+holeBlock, len(p))
			if allZero(p[n:next]) != zero {
				break
			}
			n = next
		}
		if !zero {
			if err := w.room(int64(n)); err != nil {
				return written, err
			}
			if _, err := w.f.WriteAt(p[:n], w.off); err != nil {
				return written, err
			}
		}
		w.off += int64(n)
		written += n
		p = p[n:]
	}
	return written, nil
}

// room checks, every checkEvery bytes written, that the file system keeps
// minFree bytes free.
func (w *sparseWriter) room(n int64) error {
	w.sinceFree += n
	if w.sinceFree < checkEvery {
		return nil
	}
	w.sinceFree = 0
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(w.f.Fd()), &st); err != nil {
		return err
	}
	if free := int64(st.Bavail) * st.Bsize; free < minFree {
		return fmt.Errorf("the file system of %s has %d bytes free, less than the %d it must keep: stopped writing", w.f.Name(), free, minFree)
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// SparseWriter writes a stream to f, a new empty file, from offset 0 with
// its runs of zeros left as holes, stopping before f's file system has
// less than 1 GiB free. The caller truncates f to the stream's length at
// the end (trailing holes count).
func SparseWriter(f *os.File) io.Writer { return &sparseWriter{f: f} }
