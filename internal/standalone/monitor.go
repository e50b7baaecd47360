package standalone

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/kvm"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// startMonitor starts virt-launcher-monitor as the unprivileged user, inside
// the pod network namespace when there is one.
func (r *runner) startMonitor() error {
	monitorBin, launcherBin := r.bins[0], r.bins[1]
	o := launcherflags.ForVMI(r.vmi)
	o.SetLayout(r.layout)
	o.QemuTimeout = r.cfg.QemuTimeout
	o.RunAsNonroot, o.AllowEmulation = true, true
	if r.net != nil {
		o.ResolvConf = r.net.ResolvConf
	}
	o.QemuCapsCache = r.caps
	// kvm.Usable cannot tell a nested setup where guests do not progress;
	// --emulation is for that.
	o.ForceEmulation = r.cfg.Emulation || kvm.Usable() != nil
	logFile := r.logFile
	cmd := pod.Monitor{
		Bin: monitorBin, Launcher: launcherBin, Flags: o,
		User:    r.owner.credential(),
		Network: r.net != nil,
		Dir:     r.workDir, Stdout: logFile, Stderr: logFile,
	}.Command()
	// Started from a thread in the pod's namespaces: network, and the
	// mount namespace with the VM's passwd.
	var netNS func() error
	if r.net != nil {
		netNS = pod.NetNS(r.net.NS)
	}
	proc, err := pod.Start(cmd, netNS, r.identity.Enter)
	// The child has its own copies; root keeps none.
	logFile.Close()
	r.logFile = nil
	r.identity.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", monitorBin, err)
	}
	r.monitor = cmd
	r.exited = make(chan struct{})
	go func() {
		r.exitErr = proc.Err()
		close(r.exited)
	}()
	r.log.Info("monitor started", "pid", cmd.Process.Pid, "workdir", r.workDir, "log", r.dir.Join("launcher.log"))
	return nil
}

func (r *runner) waitMonitor(timeout time.Duration) error {
	select {
	case <-r.exited:
	case <-time.After(timeout):
		r.monitor.Process.Signal(syscall.SIGTERM)
		<-r.exited
		return r.withLauncherLog(fmt.Errorf("launcher did not exit within %s of the domain's deletion", timeout))
	}
	if r.exitErr != nil {
		return r.withLauncherLog(fmt.Errorf("launcher: %w", r.exitErr))
	}
	return nil
}

// withLauncherLog adds the end of the launcher's log to an error, which is
// where the reason usually is. Only the last 64 KiB are read: the launcher
// and QEMU write the file.
func (r *runner) withLauncherLog(err error) error {
	if r.dir == nil {
		return err
	}
	f, rerr := r.dir.OpenRegular("launcher.log")
	if rerr != nil {
		return err
	}
	defer f.Close()
	const tail = 64 << 10
	if st, serr := f.Stat(); serr == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, rerr := io.ReadAll(io.LimitReader(f, tail))
	if rerr != nil || len(b) == 0 {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Errorf("%w\nlast launcher log lines:\n%s", err, strings.Join(lines, "\n"))
}

// vmEndWait is how long the VM's processes left after the monitor get to
// end by themselves (a launcher shutting its guest down) before SIGKILL.
const vmEndWait = 30 * time.Second

// endVMProcesses waits for every process that runs as the VM's id to end,
// vmEndWait at most (less on a second Ctrl-C), then kills what is left.
// Only the VM's processes run as its id, so nothing else is touched.
func (r *runner) endVMProcesses() error {
	if r.lease == nil {
		return nil
	}
	id := r.lease.ID
	left := func() []int {
		pids, _ := procfs.Holding("/proc", id)
		return pids
	}
	pids := left()
	if len(pids) == 0 {
		return nil
	}
	r.log.Info("processes of the VM outlive its monitor; waiting for them", "uid", id, "pids", pids)
	deadline := time.After(vmEndWait)
wait:
	for len(left()) > 0 {
		select {
		case <-deadline:
			break wait
		case <-r.cfg.Force:
			break wait
		case <-time.After(100 * time.Millisecond):
		}
	}
	for try := 0; try < 50; try++ {
		pids := left()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			// A pidfd pins the process; checked again through it, a pid
			// reused since the listing is never signalled.
			proc, err := os.FindProcess(pid)
			if err != nil {
				continue
			}
			if uids, gids, err := procfs.IDs("/proc", pid); err == nil && (slices.Contains(uids, id) || slices.Contains(gids, id)) {
				proc.Signal(syscall.SIGKILL)
			}
			proc.Release()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("processes %v of the VM (uid %d) survive SIGKILL", left(), id)
}

// killTree kills the monitor and every process below it. The launcher and
// libvirt's daemon run in process groups of their own and QEMU is
// libvirt's child, so the monitor's group alone would leave them running.
// It repeats until no descendant is left, for children forked meanwhile.
func killTree(pid int) {
	for i := 0; i < 20; i++ {
		below := descendants(pid)
		if len(below) == 0 {
			break
		}
		for _, p := range below {
			// A pidfd pins the process: checked again through it, a pid
			// reused since the snapshot is never signalled.
			proc, err := os.FindProcess(p)
			if err != nil {
				continue
			}
			if slices.Contains(descendants(pid), p) {
				proc.Signal(syscall.SIGKILL)
			}
			proc.Release()
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// descendants lists the living processes below pid, by /proc's parent
// links (zombies are skipped: they are dead already).
func descendants(pid int) []int {
	all, _ := procfs.List("/proc")
	var out []int
	for _, p := range procfs.Descendants(all, pid) {
		if p.State != 'Z' {
			out = append(out, p.PID)
		}
	}
	return out
}
