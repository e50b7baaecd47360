package reliability

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestScreenshotsNeverWedge: screenshots taken one after another, as a
// VNC preview or virt-handler's screenshot endpoint takes them, with a
// lifecycle call after each. A screenshot's libvirt stream whose packets
// come in an order the client library does not expect must never stall the
// launcher's connection to its daemon: every Pause and Unpause after it
// answers within its deadline, and SIGTERM ends the pod within its grace
// period plus a fixed margin.
func TestScreenshotsNeverWedge(t *testing.T) {
	t.Parallel()
	const grace = 3
	p := newPod(t, "shots", podOpts{grace: grace})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	v := p.vmi()

	rounds := 40
	if soak() {
		rounds = 400
	}
	var shots, failed int
	for i := 0; i < rounds; i++ {
		mime, data, err := c.Screenshot(ctx, v)
		switch {
		case err != nil:
			failed++
			t.Logf("round %d: %v", i, err)
		case !strings.HasPrefix(string(data), "\x89PNG\r\n\x1a\n") && !strings.HasPrefix(string(data), "P6\n"):
			t.Errorf("round %d: screenshot %q, %d bytes starting %q", i, mime, len(data), data[:min(len(data), 16)])
		default:
			shots++
		}
		for _, op := range []struct {
			name string
			f    func(context.Context) error
		}{
			{"Pause", func(ctx context.Context) error { return c.Pause(ctx, v) }},
			{"Unpause", func(ctx context.Context) error { return c.Unpause(ctx, v) }},
		} {
			octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
			err := op.f(octx)
			ocancel()
			if err != nil {
				t.Fatalf("round %d: %s after a screenshot: %v\n%s", i, op.name, err, launchertest.Tail(p.Stderr.String(), 4000))
			}
		}
	}
	t.Logf("%d screenshots, %d refused, in %d rounds", shots, failed, rounds)
	if failed > rounds/10 {
		t.Errorf("%d of %d screenshots failed", failed, rounds)
	}

	t0 := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.ExitCode(2 * time.Minute)
	took := time.Since(t0)
	t.Logf("SIGTERM: exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if limit := grace*time.Second + 30*time.Second; took > limit {
		t.Errorf("the pod took %v to end, more than %v", took, limit)
	}
	p.assertNothingLeft()
}

// TestDaemonKilledDuringFirstStart: the libvirt daemon is killed while the
// first Sync starts the domain (QEMU has just appeared). That Sync may
// fail, as any call does when its daemon dies, but the launcher stays: its
// socket answers, and virt-handler's retried Sync boots the guest, once.
func TestDaemonKilledDuringFirstStart(t *testing.T) {
	// QEMU appears early in libvirt's start; the kill lands at several
	// points after it, up to the guest's first instructions.
	for _, after := range []time.Duration{0, 150 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			t.Parallel()
			daemonKilledDuringFirstStart(t, after)
		})
	}
}

func daemonKilledDuringFirstStart(t *testing.T, after time.Duration) {
	p := newPod(t, fmt.Sprintf("kstart%d", after.Milliseconds()), podOpts{grace: 3})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.vmi()

	first := make(chan error, 1)
	go func() { first <- c.Sync(ctx, v, nil) }()
	daemon := p.MustChild("libvirtd", "virtqemud")
	p.waitDomainQemu(60 * time.Second)
	time.Sleep(after)
	launchertest.Must(t, syscall.Kill(daemon, syscall.SIGKILL))
	t.Logf("first Sync, its daemon killed as QEMU appeared: %v", <-first)

	p.syncUntilRunning(ctx, c, v, "the daemon's death")
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	if n := testguest.CountMarker(p.Console(), testguest.MarkerBooted); n != 1 {
		t.Errorf("%d boot markers on the console, want 1", n)
	}
	if !p.Running() {
		t.Fatal("the launcher ended")
	}
	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(2 * time.Minute); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	p.assertNothingLeft()
}

// waitDomainQemu waits, polling every 2 ms, until the domain's QEMU runs:
// the moment a start that is to be interrupted has got to.
func (p *pod) waitDomainQemu(timeout time.Duration) {
	p.T.Helper()
	deadline := time.Now().Add(timeout)
	for !domainQemu(p) {
		if time.Now().After(deadline) {
			p.T.Fatalf("no QEMU of the domain within %v", timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// syncUntilRunning plays virt-handler after a start that failed (after):
// it syncs again after a failed Sync and on its next reconciles, until the
// domain runs.
func (p *pod) syncUntilRunning(ctx context.Context, c *cmdclient.Client, v *v1.VirtualMachineInstance, after string) {
	p.T.Helper()
	var err error
	for try := 0; try < 10; try++ {
		if err = c.Sync(ctx, v, nil); err != nil {
			p.T.Logf("Sync %d: %v", try, err)
		} else if d, ok, gerr := c.GetDomain(ctx); gerr == nil && ok && d.Status.Status == "Running" {
			return
		}
		time.Sleep(3 * time.Second)
	}
	p.T.Fatalf("the guest never ran after %s: %v\n%s", after, err, launchertest.Tail(p.Stderr.String(), 6000))
}

// domainQemu reports whether the domain's QEMU runs (not one the daemon
// runs to probe its capabilities).
func domainQemu(p *pod) bool { return domainQemuPid(p) != 0 }

// domainQemuPid is the domain's QEMU among the pod's processes (0 if none
// runs), found without the daemon's pid file, which is elsewhere in system
// mode.
func domainQemuPid(p *pod) int {
	for _, d := range p.Descendants() {
		if !strings.HasPrefix(d.Comm, "qemu-system") {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.PID))
		if strings.Contains(string(cmd), "guest="+p.DomainName()) {
			return d.PID
		}
	}
	return 0
}

// TestKillWithDaemonStopped: virt-handler's KillVirtualMachine (as at the
// end of a grace period) while the launcher's libvirt daemon is stopped
// (SIGSTOP: hung). The destroy cannot go through the daemon; the launcher
// kills QEMU itself by the pid it knows, answers the Kill within the
// handler's deadline and ends, leaving nothing.
func TestKillWithDaemonStopped(t *testing.T) {
	t.Parallel()
	p := newPod(t, "killstop", podOpts{grace: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, qemu := p.bootWithDaemonStopped(ctx)

	t0 := time.Now()
	err := c.Kill(ctx, p.vmi())
	t.Logf("Kill with the daemon stopped: %v after %v", err, time.Since(t0).Round(time.Millisecond))
	if err != nil {
		t.Errorf("Kill: %v", err)
	}
	if st, err := procfs.ReadStat("/proc", qemu); err == nil && st.State != 'Z' {
		t.Errorf("QEMU (pid %d) still runs after the Kill answered", qemu)
	}
	code := p.ExitCode(2 * time.Minute)
	t.Logf("the launcher ended %v after the Kill, exit %d", time.Since(t0).Round(time.Millisecond), code)
	if took := time.Since(t0); took > time.Minute {
		t.Errorf("the pod took %v to end after the Kill", took)
	}
	p.assertNothingLeft()
}
