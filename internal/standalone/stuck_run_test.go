package standalone_test

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// TestVlctlRunDaemonStopped: Ctrl-C on `vlctl run` while the launcher's
// libvirt daemon is stopped (SIGSTOP: a hung daemon). Neither the ACPI
// request nor the destroy can go through the daemon, yet the guest must not
// outlive its grace period by more than a fixed margin: QEMU is gone and
// vlctl has cleaned up by then, with nothing left.
func TestVlctlRunDaemonStopped(t *testing.T) {
	needRoot(t)
	t.Parallel()
	const grace = 10 * time.Second // the keep environment's manifest
	const margin = 20 * time.Second
	e := newKeepEnv(t)
	cmd, _, stderr, exited := startStayingGuest(t, e, "stuck", false)
	uid, run := e.runProcesses(t)
	daemon, qemu := run.daemon, run.qemu
	if err := syscall.Kill(daemon, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Never leave a stopped process behind, whatever the test's end.
	defer syscall.Kill(daemon, syscall.SIGCONT)

	t0 := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	qemuGone := time.Duration(0)
	deadline := t0.Add(grace + margin + time.Minute)
	for qemuGone == 0 && time.Now().Before(deadline) {
		if st, err := procfs.ReadStat("/proc", qemu); err != nil || st.State == 'Z' {
			qemuGone = time.Since(t0)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-exited:
	case <-time.After(time.Until(deadline)):
		t.Fatalf("vlctl run still runs %v after Ctrl-C with its daemon stopped:\n%s", time.Since(t0).Round(time.Second), stderr.String())
	}
	took := time.Since(t0)
	t.Logf("Ctrl-C with the daemon stopped: QEMU gone after %v, vlctl ended after %v, exit %d:\n%s",
		qemuGone.Round(time.Millisecond), took.Round(time.Millisecond), cmd.ProcessState.ExitCode(), stderr.String())
	if qemuGone == 0 || qemuGone > grace+margin {
		t.Errorf("QEMU outlived the grace period (%v) by more than %v", grace, margin)
	}
	if took > grace+margin+10*time.Second {
		t.Errorf("vlctl ended %v after Ctrl-C, more than the grace period plus %v", took.Round(time.Second), margin+10*time.Second)
	}
	if pids, err := procfs.Holding("/proc", uid); err != nil || len(pids) > 0 {
		t.Errorf("processes %v still run as the VM's uid %d (%v)", pids, uid, err)
	}
	e.checkNothingLeft(t)
}
