package reliability

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
)

// TestStaleRPCNotCarriedOut: an Unpause whose client
// gave up while an earlier Pause held the launcher (its libvirt daemon
// stopped with SIGSTOP, so the Pause hangs inside its libvirt call) is
// never carried out afterwards: run late, it would resume a guest the
// handler has since seen paused.
func TestStaleRPCNotCarriedOut(t *testing.T) {
	t.Parallel()
	p := newPod(t, "stale", podOpts{grace: 5})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	v := p.vmi()
	waitStatus(t, ctx, c, "Running")

	daemon := p.MustChild("libvirtd", "virtqemud")
	launchertest.Must(t, syscall.Kill(daemon, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			launchertest.Must(t, syscall.Kill(daemon, syscall.SIGCONT))
		}
	}
	defer resume()

	// The Pause holds the launcher's operation lock, stuck in libvirt.
	paused := make(chan error, 1)
	go func() { paused <- c.Pause(ctx, v) }()
	time.Sleep(time.Second)
	// The Unpause waits behind it and its client gives up.
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	t0 := time.Now()
	err := c.Unpause(sctx, v)
	scancel()
	if err == nil {
		t.Fatalf("Unpause behind a hung operation succeeded within its 2 s deadline")
	}
	t.Logf("the stale Unpause's client got, after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	time.Sleep(time.Second)
	resume()
	select {
	case err := <-paused:
		t.Logf("the Pause that held the launcher returned: %v", err)
	case <-time.After(time.Minute):
		t.Fatalf("the Pause did not return a minute after the daemon resumed")
	}

	// The Pause reached the daemon before it stopped, so the guest ends
	// paused; give a late Unpause every chance to show.
	waitStatus(t, ctx, c, "Paused")
	time.Sleep(10 * time.Second)
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists || d.Status.Status != "Paused" {
		st := ""
		if d != nil {
			st = d.Status.Status
		}
		t.Errorf("after the stale Unpause: domain %q (exists %v, %v), want Paused", st, exists, err)
	}
	if !strings.Contains(p.Stderr.String(), "not carried out") {
		t.Errorf("the launcher's log does not say the stale Unpause was not carried out")
	}

	// The launcher ends on its own once QEMU is gone.
	launchertest.Must(t, c.Kill(ctx, v))
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Errorf("monitor exit status %d, want 0", code)
	}
	p.assertNothingLeft()
}

// TestDaemonStoppedAtTermination: the pod is deleted (SIGTERM) while the
// libvirt daemon does not answer (SIGSTOP). The launcher's calls to the
// daemon are bounded, so the grace period still ends; the destroy the
// daemon cannot do, the launcher does itself: it kills QEMU by the pid the
// daemon recorded and replaces the hung daemon. The pod ends within the
// grace period plus a fixed margin with nothing left, and the monitor's
// last-resort cleanup did not have to end the QEMU.
func TestDaemonStoppedAtTermination(t *testing.T) {
	t.Parallel()
	const grace = 3
	p := newPod(t, "stopd", podOpts{grace: grace})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p.bootWithDaemonStopped(ctx)

	t0 := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.ExitCode(2 * time.Minute)
	took := time.Since(t0)
	t.Logf("SIGTERM with the daemon stopped: exit %d after %v", code, took.Round(time.Millisecond))
	// grace + the destroy the daemon does not carry out (8 s), after which
	// the launcher kills QEMU by its pid and replaces the hung daemon, so
	// the final steps do not wait on it.
	if limit := grace*time.Second + 30*time.Second; took > limit {
		t.Errorf("the pod took %v to end, more than %v", took, limit)
	}
	out := p.Stderr.String()
	if !strings.Contains(out, "did not destroy the domain in time") || !strings.Contains(out, "killing QEMU") {
		t.Errorf("the launcher did not kill QEMU itself:\n%s", launchertest.Tail(out, 4000))
	}
	if strings.Contains(out, "terminating QEMU left behind") {
		t.Errorf("the monitor had to end the QEMU the launcher left")
	}
	p.assertNothingLeft()
}

// bootWithDaemonStopped boots the test guest in p, then stops (SIGSTOP) the
// launcher's libvirt daemon, as a hung daemon; the test's clean-up resumes
// it whatever happens. It returns the client and QEMU's pid.
func (p *pod) bootWithDaemonStopped(ctx context.Context) (*cmdclient.Client, int) {
	t := p.T
	t.Helper()
	p.WaitReady(60 * time.Second)
	c := p.Client(ctx)
	p.boot(ctx, c)
	qemu := p.QemuPid()
	if qemu == 0 {
		t.Fatal("no QEMU pid")
	}
	daemon := p.MustChild("libvirtd", "virtqemud")
	launchertest.Must(t, syscall.Kill(daemon, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(daemon, syscall.SIGCONT) })
	return c, qemu
}
