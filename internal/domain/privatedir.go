package domain

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// initPrivateDir makes the VMI's private directory, where QEMU creates the
// serial console and VNC sockets, and the serial console's log file in it,
// as KubeVirt's launcher does (InitializePrivateDirectories,
// InitializeConsoleLogFile): owned by the qemu user when we run as root.
// The pod's guest-console-log container tails that log as 107, in root
// pods too. It says whether it created the log (a failed define removes it).
func initPrivateDir(dir, serialLog string) (created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create VMI private dir: %w", err)
	}
	_, statErr := os.Lstat(serialLog)
	// O_NOFOLLOW: as root, never write through a link someone left there.
	fd, err := unix.Open(serialLog, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, fmt.Errorf("create the serial console log %s: %w", serialLog, err)
	}
	defer unix.Close(fd)
	created = os.IsNotExist(statErr)
	if os.Geteuid() != 0 {
		return created, nil
	}
	if err := os.Lchown(dir, vmi.RuntimeUser, vmi.RuntimeUser); err != nil {
		return created, fmt.Errorf("hand %s to the qemu user: %w", dir, err)
	}
	if err := unix.Fchown(fd, vmi.RuntimeUser, vmi.RuntimeUser); err != nil {
		return created, fmt.Errorf("hand %s to the qemu user: %w", serialLog, err)
	}
	return created, nil
}
