package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// errForeignProc means /proc belongs to another pid namespace than ours.
var errForeignProc = errors.New("/proc is not mounted for this pid namespace; refusing to look for processes to stop")

// procIsOurs reports whether procRoot shows our pid namespace: its "self"
// must be our pid. In a pid namespace whose /proc was not remounted (say,
// `unshare --pid --fork` without --mount-proc) we are pid 1 but /proc lists
// the host's processes, every one of which descends from its pid 1: without
// this check the monitor would signal the whole machine.
func procIsOurs(procRoot string) bool {
	self, err := os.Readlink(procRoot + "/self")
	return err == nil && self == strconv.Itoa(os.Getpid())
}

// descendants returns the living (non-zombie) descendants of root that
// match, sorted by nothing in particular. As a child subreaper the monitor
// inherits every orphan of its tree, so a process it started can only
// leave root's parent chains by being re-parented to an ancestor of the
// monitor, which it cannot do while the monitor lives.
func descendants(procRoot string, root int, match func(procfs.Stat) bool) ([]procfs.Stat, error) {
	if !procIsOurs(procRoot) {
		return nil, errForeignProc
	}
	procs, err := procfs.List(procRoot)
	if err != nil {
		return nil, err
	}
	var out []procfs.Stat
	for _, p := range procfs.Descendants(procs, root) {
		if p.State != 'Z' && (match == nil || match(p)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// isQemu recognises QEMU by its command name (qemu-system-<arch>, truncated
// by the kernel to 15 bytes, or qemu-kvm) or by argv[0].
func isQemu(procRoot string, p procfs.Stat) bool {
	if qemuName(p.Comm) {
		return true
	}
	args, err := procfs.Cmdline(procRoot, p.PID)
	return err == nil && len(args) > 0 && qemuName(filepath.Base(args[0]))
}

func qemuName(s string) bool {
	return strings.HasPrefix(s, "qemu-system") || s == "qemu-kvm"
}

// Linux syscall numbers shared by every architecture since 5.1.
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// signalIfStill sends sig to p.PID only if that pid is still a living
// descendant of root with the same command name. With a pidfd the check and
// the signal refer to the same process even if the pid is reused in
// between; on kernels without pidfds it falls back to kill(2).
func signalIfStill(procRoot string, root int, p procfs.Stat, sig syscall.Signal) error {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(p.PID), 0, 0)
	usePidfd := errno == 0
	if errno == syscall.ESRCH {
		return errno
	}
	if usePidfd {
		defer syscall.Close(int(fd))
	}
	if !procIsOurs(procRoot) {
		return errForeignProc
	}
	// Still a living descendant of root with the same name.
	now, err := descendants(procRoot, root, func(q procfs.Stat) bool { return q.PID == p.PID && q.Comm == p.Comm })
	if err != nil {
		return err
	}
	if len(now) == 0 {
		return syscall.ESRCH
	}
	if usePidfd {
		if _, _, errno := syscall.Syscall6(sysPidfdSendSignal, fd, uintptr(sig), 0, 0, 0, 0); errno != 0 {
			return errno
		}
		return nil
	}
	return syscall.Kill(p.PID, sig)
}
