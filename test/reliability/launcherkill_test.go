package reliability

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// answerBound is how long launcher-sock may refuse connections after the
// launcher's death: well inside virt-handler's stale-socket watchdog
// (about 30 s of refusals fail the VMI).
const answerBound = 5 * time.Second

// TestLauncherKilledGuestLives: the launcher process (not the monitor) is
// killed with SIGKILL while the guest runs, as an OOM kill would end it,
// and at last crashes (the Go runtime's SIGQUIT dump, which ends it as a
// panic does). The monitor starts a new launcher, which takes the running
// guest back: the same QEMU throughout, one boot, launcher-sock never
// missing and answering again within answerBound, every call working
// after each restart; SIGTERM at the end still ends the pod cleanly.
func TestLauncherKilledGuestLives(t *testing.T) {
	t.Parallel()
	kills := 3
	if soak() {
		kills = 20
	}
	p := newPodDeferred(t, "lkill", podOpts{grace: 3})
	// The default budget (5 restarts in 10 minutes) would end the soak's
	// run after its sixth kill.
	p.SetEnv(monitor.EnvRestarts, strconv.Itoa(kills))
	events := p.Notify(notifytest.Options{})
	p.Start()
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	v := p.vmi()
	qemu := p.QemuPid()

	sock := p.Layout.ReadySocket()
	watch := watchSocket(sock)
	defer watch.stop()

	for i := 0; i < kills; i++ {
		// The last death is a crash of the Go runtime (SIGQUIT dumps the
		// stacks and ends the process as a panic does), the others
		// SIGKILL, as the OOM killer sends.
		sig := syscall.SIGKILL
		if i == kills-1 {
			sig = syscall.SIGQUIT
		}
		old := p.MustChild("virt-launcher")
		seen := len(events.Events())
		// Some deaths come in the middle of a call: a Sync, a guest
		// agent call. The call fails; virt-handler's next one works.
		during, inflight := "", make(chan error, 1)
		switch i % 3 {
		case 1:
			during = " during a Sync"
			go func(c *cmdclient.Client) { inflight <- c.Sync(ctx, v, nil) }(c)
		case 2:
			during = " during a guest agent call"
			go func(c *cmdclient.Client) { _, err := c.GetGuestInfo(ctx); inflight <- err }(c)
		default:
			inflight <- nil
		}
		time.Sleep(5 * time.Millisecond)
		t0 := time.Now()
		launchertest.Must(t, syscall.Kill(old, sig))
		c = dialAgain(t, ctx, p, old, t0)
		took := time.Since(t0)
		t.Logf("kill %d (%v%s): launcher-sock answered again after %v; the call under way: %v", i+1, sig, during, took.Round(time.Millisecond), <-inflight)
		if took > answerBound {
			t.Errorf("kill %d: launcher-sock answered only after %v (bound %v)", i+1, took, answerBound)
		}
		// virt-handler learns at once that the launcher is back and the
		// guest runs: a MODIFIED event, before any call of its own.
		waitRunningEvent(t, events, seen, i+1)
		guestTakenOver(t, ctx, p, c, v, qemu, fmt.Sprintf("kill %d", i+1))
		// A second between deaths, so that each outage is one for the
		// watch's 250 ms poll (back to back, it saw several in a row as
		// one run of refusals).
		time.Sleep(time.Second)
	}
	missing, longest := watch.stop()
	t.Logf("launcher-sock watch: missing %d times, longest run of refusals %v (ended %s; the last refusal: %v)", missing, longest.Round(time.Millisecond),
		watch.longestEnd.UTC().Format("15:04:05.000"), watch.lastErr)
	if missing > 0 {
		t.Errorf("launcher-sock was missing %d times (virt-handler fails the VMI at once then)", missing)
	}
	if longest > answerBound {
		t.Errorf("launcher-sock refused connections for %v in a row (bound %v)", longest, answerBound)
	}
	// The host stays the same for libvirt (its migration cookies name it).
	if ids := hostUUIDs(p.Stderr.String()); len(ids) != 1 {
		t.Errorf("the launchers' daemons had host UUIDs %v, want one", ids)
	}
	if n := testguest.CountMarker(p.Console(), testguest.MarkerBooted); n != 1 {
		t.Errorf("%d boot markers on the console, want 1 (the guest rebooted)", n)
	}
	// The monitor's record says how often, and why the last time.
	if rec, ok, err := monitor.ReadRestarts(p.Layout.PrivateDir); err != nil || !ok || rec.Count != kills || !strings.Contains(rec.Reason, "died of signal") {
		t.Errorf("restart record %+v (found %v, err %v), want %d restarts with the last one's reason", rec, ok, err, kills)
	}

	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(2 * time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	events.Stop() // the handler's socket, not the pod's
	p.assertNothingLeft()
}

// TestLauncherKilledRestartsOff: the control case. With restarts switched
// off (for the machine by the monitor's environment, or for one VM by its
// VMI's annotation) the monitor does what KubeVirt's does: once the
// launcher is killed it stops QEMU and the pod ends with the launcher's
// status.
func TestLauncherKilledRestartsOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		env        bool
		annotation string
	}{
		{name: "by the environment", env: true},
		{name: "by the VMI's annotation", annotation: "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPodDeferred(t, "lkilloff", podOpts{grace: 3})
			if tc.env {
				p.SetEnv(monitor.EnvRestarts, "0")
			}
			p.Start()
			p.WaitReady(60 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			c := p.Client(ctx)
			v := p.vmi()
			if tc.annotation != "" {
				v.Annotations = map[string]string{vmi.AnnotationLauncherRestarts: tc.annotation}
			}
			if err := c.Sync(ctx, v, nil); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			p.WaitConsole(testguest.MarkerReady, bootTimeout)
			qemu := p.QemuPid()

			launchertest.Must(t, syscall.Kill(p.MustChild("virt-launcher"), syscall.SIGKILL))
			if code := p.ExitCode(time.Minute); code != 128+int(syscall.SIGKILL) {
				t.Errorf("exit code %d, want %d (the launcher's, killed)", code, 128+int(syscall.SIGKILL))
			}
			if st, err := procfs.ReadStat("/proc", qemu); err == nil && st.State != 'Z' {
				t.Errorf("QEMU (pid %d) outlived the pod", qemu)
			}
			p.assertNothingLeft()
		})
	}
}

// guestTakenOver checks, after a launcher of p was replaced (when says
// which time), that the new one (c) has the guest: GetDomain finds it
// Running, Pause, Unpause and Sync work, each within 30 s, and the same
// QEMU (pid qemu) runs.
func guestTakenOver(t *testing.T, ctx context.Context, p *pod, c *cmdclient.Client, v *v1.VirtualMachineInstance, qemu int, when string) {
	t.Helper()
	if d, ok, err := c.GetDomain(ctx); err != nil || !ok || d.Status.Status != "Running" {
		t.Fatalf("%s: GetDomain: exists %v, err %v, domain %+v\n%s", when, ok, err, d, launchertest.Tail(p.Stderr.String(), 6000))
	}
	for _, op := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"Pause", func(ctx context.Context) error { return c.Pause(ctx, v) }},
		{"Unpause", func(ctx context.Context) error { return c.Unpause(ctx, v) }},
		{"Sync", func(ctx context.Context) error { return c.Sync(ctx, v, nil) }},
	} {
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		err := op.f(octx)
		ocancel()
		if err != nil {
			t.Fatalf("%s: %s: %v\n%s", when, op.name, err, launchertest.Tail(p.Stderr.String(), 6000))
		}
	}
	if now := p.QemuPid(); now != qemu {
		t.Fatalf("%s: QEMU pid %d, was %d", when, now, qemu)
	}
	if st, err := procfs.ReadStat("/proc", qemu); err != nil || st.State == 'Z' {
		t.Fatalf("%s: QEMU (pid %d) is gone", when, qemu)
	}
}

// waitRunningEvent waits up to answerBound for a MODIFIED event with the
// domain running, after the first seen events.
func waitRunningEvent(t *testing.T, s *notifytest.Server, seen, kill int) {
	t.Helper()
	deadline := time.Now().Add(answerBound)
	for {
		evs := s.Events()
		for _, e := range evs[min(seen, len(evs)):] {
			if e.EventType == "MODIFIED" && e.Domain != nil && e.Domain.Status.Status == "Running" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kill %d: no MODIFIED event with the domain running within %v of the new launcher answering", kill, answerBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostUUIDs are the distinct host UUIDs the launchers logged for their
// daemons.
func hostUUIDs(log string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`"hostUUID":"([^"]+)"`).FindAllStringSubmatch(log, -1) {
		if !slices.Contains(ids, m[1]) {
			ids = append(ids, m[1])
		}
	}
	return ids
}

// dialAgain waits for a launcher other than old and dials launcher-sock
// until it answers (Info and Ping), within a minute of t0.
func dialAgain(t *testing.T, ctx context.Context, p *pod, old int, t0 time.Time) *cmdclient.Client {
	t.Helper()
	deadline := t0.Add(time.Minute)
	for {
		if !p.Running() {
			t.Fatalf("the pod ended after its launcher was killed (exit %v)\n%s", p.ExitErr, launchertest.Tail(p.Stderr.String(), 6000))
		}
		if pid := p.Child("virt-launcher"); pid != 0 && pid != old {
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			c, err := cmdclient.Dial(dctx, p.Layout.ReadySocket())
			if err == nil {
				err = c.Ping(dctx)
				if err != nil {
					c.Close()
				}
			}
			dcancel()
			if err == nil {
				t.Cleanup(func() { c.Close() })
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher-sock did not answer within a minute of the kill\n%s", launchertest.Tail(p.Stderr.String(), 6000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// socketWatch dials a unix socket every 250 ms, as virt-handler's
// stale-socket watchdog looks at it, counting the times the file was
// missing and the longest run of refused connections.
type socketWatch struct {
	done chan struct{}
	wg   sync.WaitGroup

	missing int
	longest time.Duration
	// longestEnd is when the longest run of refusals ended; lastErr is
	// the last refusal's error.
	longestEnd time.Time
	lastErr    error
}

func watchSocket(path string) *socketWatch {
	w := &socketWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var refusedSince time.Time
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				if !refusedSince.IsZero() { // refused still
					w.longest, w.longestEnd = max(w.longest, time.Since(refusedSince)), time.Now()
				}
				return
			case <-tick.C:
			}
			if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
				w.missing++
			}
			conn, err := net.DialTimeout("unix", path, time.Second)
			if err == nil {
				conn.Close()
				// A run of refusals lasts from the first refused dial
				// to this one that went through (an upper bound: the
				// poll's period included).
				if !refusedSince.IsZero() {
					if d := time.Since(refusedSince); d >= w.longest {
						w.longest, w.longestEnd = d, time.Now()
					}
				}
				refusedSince = time.Time{}
				continue
			}
			w.lastErr = err
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
		}
	}()
	return w
}

// stop ends the watch (once; later calls return the same figures).
func (w *socketWatch) stop() (missing int, longest time.Duration) {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	w.wg.Wait()
	return w.missing, w.longest
}

// TestLauncherKilledWhileFrozen: the launcher dies while the guest's file
// systems are frozen with an unfreeze timeout (as a snapshot freezes them,
// virt-handler asking for the thaw later). The new launcher takes over the
// pending automatic thaw: the guest is thawed when its time comes, not
// left frozen for want of the launcher that was to thaw it.
func TestLauncherKilledWhileFrozen(t *testing.T) {
	t.Parallel()
	const unfreezeAfter = 15 * time.Second
	p := newPod(t, "lfrozen", podOpts{grace: 3})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	p.WaitConsole(testguest.MarkerAgent, bootTimeout)
	v := p.vmi()
	waitFreezeStatus(t, ctx, c, "thawed", time.Minute)

	frozeAt := time.Now()
	launchertest.Must(t, c.Freeze(ctx, v, int32(unfreezeAfter/time.Second)))
	waitFreezeStatus(t, ctx, c, "frozen", 20*time.Second)
	old := p.MustChild("virt-launcher")
	launchertest.Must(t, syscall.Kill(old, syscall.SIGKILL))
	c = dialAgain(t, ctx, p, old, time.Now())

	waitFreezeStatus(t, ctx, c, "thawed", time.Until(frozeAt.Add(unfreezeAfter+30*time.Second)))
	t.Logf("thawed %v after the freeze (timeout %v)", time.Since(frozeAt).Round(time.Second), unfreezeAfter)
	if took := time.Since(frozeAt); took < unfreezeAfter {
		t.Errorf("thawed after %v, before the unfreeze timeout %v", took, unfreezeAfter)
	}

	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(2 * time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	p.assertNothingLeft()
}

// waitFreezeStatus waits until GetGuestInfo reports the guest's file
// systems in state want.
func waitFreezeStatus(t *testing.T, ctx context.Context, c *cmdclient.Client, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var info string
	var err error
	for {
		if info, err = c.GetGuestInfo(ctx); err == nil && strings.Contains(info, `"fsFreezeStatus":"`+want+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("file systems not %s after %v: GetGuestInfo %s, %v", want, timeout, info, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestLauncherKilledDuringFirstStart: the launcher dies while its first
// Sync starts the domain (QEMU has just appeared). That Sync fails, as a
// call does when the launcher dies under it; the monitor starts a new
// launcher (a QEMU of the pod runs), and virt-handler's retried Sync finds
// the domain as libvirt left it and boots the guest, once.
func TestLauncherKilledDuringFirstStart(t *testing.T) {
	t.Parallel()
	p := newPod(t, "lkstart", podOpts{grace: 3})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.vmi()

	first := make(chan error, 1)
	go func() { first <- c.Sync(ctx, v, nil) }()
	p.waitDomainQemu(60 * time.Second)
	old := p.MustChild("virt-launcher")
	launchertest.Must(t, syscall.Kill(old, syscall.SIGKILL))
	t.Logf("first Sync, its launcher killed as QEMU appeared: %v", <-first)
	c = dialAgain(t, ctx, p, old, time.Now())

	p.syncUntilRunning(ctx, c, v, "the launcher's death")
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	if n := testguest.CountMarker(p.Console(), testguest.MarkerBooted); n != 1 {
		t.Errorf("%d boot markers on the console, want 1", n)
	}
	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(2 * time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	p.assertNothingLeft()
}
