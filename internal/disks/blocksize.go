package disks

import (
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// blockSizes probes the logical and physical block sizes of a volume for
// disks with blockSize.matchVolume, as KubeVirt's converter does: a block
// device's own (BLKSSZGET, BLKPBSZGET; one of them 0 takes the other's),
// a file's file system block size for both (statfs; of its directory when
// the file does not exist yet). 0, 0 when it cannot tell: the disk then
// gets QEMU's defaults.
func blockSizes(path string, block bool) (logical, physical uint) {
	if !block {
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil {
			if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
				return 0, 0
			}
		}
		return uint(st.Bsize), uint(st.Bsize)
	}
	// O_NONBLOCK: a device that is busy or has no medium opens at once;
	// only the ioctls are needed.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	l, lerr := unix.IoctlGetUint32(int(f.Fd()), unix.BLKSSZGET)
	p, perr := unix.IoctlGetUint32(int(f.Fd()), unix.BLKPBSZGET)
	if lerr != nil || perr != nil || (l == 0 && p == 0) {
		return 0, 0
	}
	if l == 0 {
		l = p
	}
	if p == 0 {
		p = l
	}
	return uint(l), uint(p)
}
