package monitor

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// proc is what the monitor needs to know about one process.
type proc struct {
	pid, ppid int
	comm      string // /proc/<pid>/comm (at most 15 bytes)
	state     byte   // R, S, D, Z, ...
}

// readProc parses /proc/<pid>/stat.
func readProc(procRoot string, pid int) (proc, error) {
	s, err := procfs.ReadStat(procRoot, pid)
	if err != nil {
		return proc{}, err
	}
	return proc{pid: pid, ppid: s.PPID, comm: s.Comm, state: s.State}, nil
}

// listProcs reads every process of /proc. Processes that vanish while it
// reads are skipped.
func listProcs(procRoot string) (map[int]proc, error) {
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	procs := make(map[int]proc, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, err := readProc(procRoot, pid); err == nil {
			procs[pid] = p
		}
	}
	return procs, nil
}

// isDescendant reports whether pid's parent chain reaches root. As a child
// subreaper the monitor inherits every orphan of its tree, so a process it
// started can only leave this chain by being re-parented to an ancestor of
// the monitor, which it cannot do while the monitor lives.
func isDescendant(procs map[int]proc, pid, root int) bool {
	for steps := 0; steps < len(procs)+1; steps++ {
		p, ok := procs[pid]
		if !ok || p.ppid == 0 {
			return false
		}
		if p.ppid == root {
			return true
		}
		pid = p.ppid
	}
	return false // a cycle: /proc changed under us
}

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
// match, sorted by nothing in particular.
func descendants(procRoot string, root int, match func(proc) bool) ([]proc, error) {
	if !procIsOurs(procRoot) {
		return nil, errForeignProc
	}
	procs, err := listProcs(procRoot)
	if err != nil {
		return nil, err
	}
	var out []proc
	for pid, p := range procs {
		if pid == root || p.state == 'Z' || !isDescendant(procs, pid, root) {
			continue
		}
		if match == nil || match(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// isQemu recognises QEMU by its command name (qemu-system-<arch>, truncated
// by the kernel to 15 bytes, or qemu-kvm) or by argv[0].
func isQemu(procRoot string, p proc) bool {
	if qemuName(p.comm) {
		return true
	}
	cmdline, err := os.ReadFile(procRoot + "/" + strconv.Itoa(p.pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	if i := bytes.LastIndexByte(argv0, '/'); i >= 0 {
		argv0 = argv0[i+1:]
	}
	return qemuName(string(argv0))
}

func qemuName(s string) bool {
	return strings.HasPrefix(s, "qemu-system") || s == "qemu-kvm"
}

// Linux syscall numbers shared by every architecture since 5.1.
const (
	sysPidfdSendSignal = 424
	sysPidfdOpen       = 434
)

// signalIfStill sends sig to p.pid only if that pid is still a living
// descendant of root with the same command name. With a pidfd the check and
// the signal refer to the same process even if the pid is reused in
// between; on kernels without pidfds it falls back to kill(2).
func signalIfStill(procRoot string, root int, p proc, sig syscall.Signal) error {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(p.pid), 0, 0)
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
	procs, err := listProcs(procRoot)
	if err != nil {
		return err
	}
	now, ok := procs[p.pid]
	if !ok || now.comm != p.comm || now.state == 'Z' || !isDescendant(procs, p.pid, root) {
		return syscall.ESRCH
	}
	if usePidfd {
		if _, _, errno := syscall.Syscall6(sysPidfdSendSignal, fd, uintptr(sig), 0, 0, 0, 0); errno != 0 {
			return errno
		}
		return nil
	}
	return syscall.Kill(p.pid, sig)
}
