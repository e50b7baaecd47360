package standalone

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/kvm"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/pod"
)

// startMonitor starts virt-launcher-monitor as the unprivileged user, inside
// the pod network namespace when there is one.
func (r *runner) startMonitor() error {
	monitorBin, launcherBin := r.bins[0], r.bins[1]
	o := launcherflags.ForVMI(r.vmi)
	o.SetLayout(r.launcherLayout())
	o.QemuTimeout = r.cfg.QemuTimeout
	o.RunAsNonroot, o.AllowEmulation = true, true
	if r.net != nil {
		o.ResolvConf = r.net.ResolvConf
	}
	o.QemuCapsCache = r.caps
	o.ForceEmulation = r.emulation()
	logFile := r.logFile
	cmd := pod.Monitor{
		Bin: monitorBin, Launcher: launcherBin, Flags: o,
		User:    r.owner.credential(),
		Network: r.net != nil,
		Env:     r.cfg.deviceEnv,
		Dir:     r.workDir, Stdout: logFile, Stderr: logFile,
	}.Command()
	if err := r.grantVFIO(); err != nil {
		return err
	}
	// Started from a thread in the pod's namespaces: network, and the
	// mount namespace with the VM's passwd.
	var netNS func() error
	if r.net != nil {
		netNS = pod.NetNS(r.net.NS)
	}
	// A migration's target sees its pod where the source's launcher
	// sees its own (migrate.go).
	var bind func() error
	if root := r.launcherRoot(); root != r.workDir {
		bind = pod.BindAt(r.workDir, root)
	}
	// With --cpuset the pod runs in a cpuset cgroup of its own, where its
	// launcher finds its CPUs as under a CPU manager.
	var inCgroup func() error
	placed := func() error { return nil }
	if len(r.cfg.CPUSet) > 0 {
		cg, err := hostcpu.NewCgroup("vlctl-", r.cfg.CPUSet)
		if err != nil {
			return fmt.Errorf("--cpuset: %w", err)
		}
		r.cgroup = cg
		if inCgroup, placed, err = cg.Place(cmd); err != nil {
			return fmt.Errorf("--cpuset: %w", err)
		}
	}
	proc, err := pod.Start(cmd, netNS, r.identity.Enter, bind, inCgroup)
	if perr := placed(); perr != nil && err == nil {
		r.log.Warn("the thread that started the monitor stays in its cpuset cgroup", "error", perr)
	}
	// The child has its own copies; root keeps none.
	logFile.Close()
	r.logFile = nil
	r.identity.Close()
	if err != nil {
		return fmt.Errorf("start %s: %w", monitorBin, err)
	}
	r.monitor = proc
	r.log.Info("monitor started", "pid", cmd.Process.Pid, "workdir", r.workDir, "log", r.dir.Join("launcher.log"))
	return nil
}

// emulation says whether the guest runs under TCG: asked for, or KVM
// unusable here. kvm.Usable cannot tell a nested setup where guests do not
// progress; --emulation is for that.
func (r *runner) emulation() bool { return r.cfg.Emulation || kvm.Usable() != nil }

func (r *runner) waitMonitor(timeout time.Duration) error {
	select {
	case <-r.monitor.Done():
	case <-time.After(timeout):
		r.monitor.Cmd.Process.Signal(syscall.SIGTERM)
		<-r.monitor.Done()
		return r.withLauncherLog(fmt.Errorf("launcher did not exit within %s of the domain's deletion", timeout))
	}
	if r.monitor.Err() != nil {
		return r.withLauncherLog(fmt.Errorf("launcher: %w", r.monitor.Err()))
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
	if pids := pod.Holding(id)(); len(pids) > 0 {
		r.log.Info("processes of the VM outlive its monitor; waiting for them", "uid", id, "pids", pids)
	}
	if err := pod.EndProcesses(context.Background(), pod.Holding(id), pod.EndOptions{Grace: vmEndWait, Force: r.cfg.Force}); err != nil {
		return fmt.Errorf("the VM's processes (uid %d): %w", id, err)
	}
	return nil
}

// killTree kills the monitor and every process below it, those first: once
// the monitor is gone, its orphans are no longer below it.
func killTree(pid int) {
	pod.EndProcesses(context.Background(), pod.Below(pid), pod.EndOptions{})
	syscall.Kill(pid, syscall.SIGKILL)
}
