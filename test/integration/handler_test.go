package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// startNotify plays virt-handler's notify pipe inside the pod.
func startNotify(t *testing.T, p *pod) *notifytest.Server {
	t.Helper()
	return p.Notify(notifytest.Options{})
}

// waitEvent waits for an event matching ok and returns its index.
func waitEvent(t *testing.T, s *notifytest.Server, from int, what string, ok func(notifytest.Event) bool) int {
	t.Helper()
	deadline := time.Now().Add(2 * bootTimeout)
	for {
		evs := s.Events()
		for i := from; i < len(evs); i++ {
			if evs[i].Domain != nil && ok(evs[i]) {
				return i
			}
		}
		if time.Now().After(deadline) {
			var seen []string
			for _, e := range evs {
				if e.Domain != nil {
					seen = append(seen, e.EventType+" "+e.Domain.Status.Status+"/"+e.Domain.Status.Reason)
				}
			}
			t.Fatalf("no event %s; events: %v", what, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The full virt-handler lifecycle (Info, Sync, events, strict GetDomain,
// Shutdown, Delete, exit) is test/conformance TestHandlerLifecycle.

// TestSIGTERMMarksGracefulShutdown: SIGTERM to the monitor puts
// MarkedForGracefulShutdown=true into an event; with a handler present and
// no Delete coming, the launcher still ends after its 15 s wait.
func TestSIGTERMMarksGracefulShutdown(t *testing.T) {
	t.Parallel()
	p := env.New(t, "sigterm", podOpts{SharedCaps: true})
	p.WaitReady(30 * time.Second)
	s := startNotify(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	launchertest.Must(t, c.Sync(ctx, p.VMI("sigterm-1"), nil))
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	p.Signal(syscall.SIGTERM)
	waitEvent(t, s, 0, "MarkedForGracefulShutdown", func(e notifytest.Event) bool {
		gp := e.Domain.Spec.Metadata.KubeVirt.GracePeriod
		return gp != nil && gp.MarkedForGracefulShutdown != nil && *gp.MarkedForGracefulShutdown
	})
	p.WaitConsole(testguest.MarkerPowerOff, time.Minute)
	waitEvent(t, s, 0, "gone", func(e notifytest.Event) bool { return e.Domain.DeletionTimestamp != nil })
	if code := p.ExitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	p.AssertNothingLeft()
}

// TestStartPaused: startStrategy Paused starts QEMU paused; Syncs do not
// resume it (the pause counts as the user's); Unpause does; Kill ends it.
func TestStartPaused(t *testing.T) {
	t.Parallel()
	p := env.New(t, "paused", podOpts{SharedCaps: true})
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("paused-1")
	strategy := v1.StartStrategyPaused
	v.Spec.StartStrategy = &strategy
	launchertest.Must(t, c.Sync(ctx, v, nil))
	// Right after the start libvirt may still say StartingUp; a start
	// paused settles as a user pause.
	waitStatus(t, ctx, c, "Paused", "User")
	for i := 0; i < 3; i++ {
		launchertest.Must(t, c.Sync(ctx, v, nil))
	}
	time.Sleep(500 * time.Millisecond)
	if d, _, _ := c.GetDomain(ctx); d.Status.Status != "Paused" {
		t.Fatalf("Sync resumed a domain started paused: %s/%s", d.Status.Status, d.Status.Reason)
	}
	if p.Console() != "" && strings.Contains(p.Console(), testguest.MarkerBooted) {
		t.Errorf("guest ran while paused")
	}
	launchertest.Must(t, c.Unpause(ctx, v))
	waitStatus(t, ctx, c, "Running", "Unknown")
	p.WaitConsole(testguest.MarkerBooted, bootTimeout)
	if err := c.Kill(ctx, v); err != nil && !cmdclient.IsDisconnected(err) {
		t.Fatalf("Kill: %v", err)
	}
	if code := p.ExitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit status %d after Kill, want 0", code)
	}
	p.AssertNothingLeft()
}

// TestIOErrorPause: the emptyDisk lives on a 2 MiB file system; the guest
// fills it, QEMU stops the guest (werror=stop), the launcher sends the
// IOerror Kubernetes event, and a Sync resumes the domain because it was
// not the user who paused it.
func TestIOErrorPause(t *testing.T) {
	t.Parallel()
	p := env.NewDeferred(t, "ioerr", podOpts{SharedCaps: true})
	emptyDir := filepath.Dir(p.Layout.EmptyDisk("scratch"))
	launchertest.Must(t, os.MkdirAll(emptyDir, 0o750))
	opts := fmt.Sprintf("size=2m,mode=0750,uid=%d,gid=%d", env.Cred.Uid, env.Cred.Gid)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "vl-ioerr", emptyDir).CombinedOutput(); err != nil {
		t.Fatalf("cannot mount a small tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(emptyDir, syscall.MNT_DETACH) })
	launchertest.Must(t, os.Chown(filepath.Dir(emptyDir), int(env.Cred.Uid), int(env.Cred.Gid)))
	p.ExtraUserData = []string{"dd if=/dev/zero of=/dev/vdb bs=1M count=16 conv=fsync", `echo "dd rc=$?"`}
	p.Start()
	p.WaitReady(30 * time.Second)
	s := startNotify(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("ioerr-1")
	launchertest.Must(t, c.Sync(ctx, v, nil))
	waitStatus(t, ctx, c, "Paused", "IOError")

	deadline := time.Now().Add(20 * time.Second)
	for {
		var got bool
		for _, e := range s.Events() {
			if e.K8s != nil && e.K8s.Reason == "IOerror" {
				got = true
				if e.K8s.Type != "Warning" || string(e.K8s.InvolvedObject.UID) != p.UID ||
					!strings.Contains(e.K8s.Message, "IO error") {
					t.Errorf("IOerror event %+v", e.K8s)
				}
			}
		}
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no IOerror k8s event; events: %d", len(s.Events()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Not the user's pause: Sync resumes it (it may stop again at once, as
	// the disk is still full).
	launchertest.Must(t, c.Sync(ctx, v, nil))
	if !strings.Contains(p.Stderr.String(), "resumed domain paused by libvirt") {
		// The launcher logs to the monitor's stderr.
		time.Sleep(time.Second)
		if !strings.Contains(p.Stderr.String(), "resumed domain paused by libvirt") {
			t.Errorf("Sync did not resume the IOError-paused domain")
		}
	}
	if err := c.Kill(ctx, v); err != nil && !cmdclient.IsDisconnected(err) {
		t.Fatalf("Kill: %v", err)
	}
	if code := p.ExitCode(40 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	p.AssertNothingLeft()
}
