package netsetup

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtool commands (linux/ethtool.h).
const (
	ethtoolGTXCSUM = 0x16
	ethtoolSTXCSUM = 0x17
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte // pad to sizeof(struct ifreq)
}

// txChecksum reads (set=false) or sets TX checksum offload of a link in
// the current namespace. KubeVirt turns it off on the bridge: packets the
// DHCP server sends from the bridge would otherwise reach the guest with a
// checksum left for hardware that is not there, which some DHCP clients
// drop.
func txChecksum(name string, set bool, on bool) (bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: ethtoolGTXCSUM}
	if set {
		v.cmd = ethtoolSTXCSUM
		if on {
			v.data = 1
		}
	}
	var req ifreqData
	copy(req.name[:], name)
	req.data = uintptr(unsafe.Pointer(&v))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return false, fmt.Errorf("ethtool tx checksum on %s: %w", name, errno)
	}
	return v.data != 0, nil
}
