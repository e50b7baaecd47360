package integration

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

const bootTimeout = 90 * time.Second

// TestLifecycle is the main path: ready socket, Sync over gRPC, the guest
// boots from the containerDisk overlay, reads its cloud-init user-data and
// writes its disk; 20 more Syncs change nothing; a SIGKILLed libvirt daemon
// is restarted without taking the guest down; SIGTERM to the monitor ends
// with the guest powering itself off, status 0, nothing left behind, and
// the container-disk image unchanged.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	p := env.New(t, "life", podOpts{})
	backing := launchertest.SHA256File(t, p.Layout.ContainerDiskImage(0))
	p.WaitReady(30 * time.Second)
	t.Logf("monitor start -> launcher-sock: %v", p.Ready)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	// Without the guest agent: its connecting would change the Domain
	// between the two reads around the repeated Syncs below, for reasons
	// of its own (conformance TestGuestAgent covers it).
	v := p.VMI("life-7f3a", testguest.OptNoAgent)

	// No running domain, no stats: KubeVirt's launcher fails the call too.
	if s, err := c.GetDomainStats(ctx); err == nil || !strings.Contains(err.Error(), "empty DomainStats") {
		t.Errorf("GetDomainStats before Sync: %q, %v; want a failure", s, err)
	}

	t0 := time.Now()
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	t.Logf("Sync (define+start) took %v", time.Since(t0))
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain after Sync: exists=%v err=%v", exists, err)
	}
	if d.Spec.Metadata.KubeVirt.UID != p.UID {
		t.Errorf("domain metadata UID %q, want %q", d.Spec.Metadata.KubeVirt.UID, p.UID)
	}

	p.WaitConsole(testguest.MarkerBooted, bootTimeout)
	t.Logf("Sync -> guest init running: %v", time.Since(t0))
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	out := p.Console()
	if rest, ok := testguest.FindMarker(out, testguest.MarkerDiskWritten); !ok {
		t.Errorf("guest did not write its root disk; console:\n%s", out)
	} else {
		t.Logf("guest wrote its disk %s", rest)
	}
	if n, _ := testguest.FindMarker(out, testguest.MarkerBootCount); n != "1" {
		t.Errorf("boot count %q, want 1 (a fresh overlay)", n)
	}
	if kind, _ := testguest.FindMarker(out, testguest.MarkerCloudInit); !strings.HasPrefix(kind, "nocloud") {
		t.Errorf("cloud-init: %q, want nocloud", kind)
	}
	if rc, _ := testguest.FindMarker(out, testguest.MarkerUserDataRan); rc != "rc=0" {
		t.Errorf("user-data ran: %q, want rc=0", rc)
	}
	if !strings.Contains(out, "token life-7f3a") {
		t.Errorf("user-data output missing; console:\n%s", out)
	}
	if !strings.Contains(out, "VL-DISK vdb size 131072") {
		t.Errorf("64Mi emptyDisk (131072 sectors) not seen as vdb; console:\n%s", out)
	}

	// Sync repeated 20 times changes nothing: same QEMU, same domain.
	qpid := p.QemuPid()
	before, _, err := c.GetDomain(ctx)
	launchertest.Must(t, err)
	t1 := time.Now()
	for i := 0; i < 20; i++ {
		if err := c.Sync(ctx, v, nil); err != nil {
			t.Fatalf("Sync #%d: %v", i+2, err)
		}
	}
	t.Logf("20 repeated Syncs took %v", time.Since(t1))
	after, _, err := c.GetDomain(ctx)
	launchertest.Must(t, err)
	bj, _ := json.Marshal(before)
	aj, _ := json.Marshal(after)
	if string(bj) != string(aj) {
		t.Errorf("domain changed by repeated Syncs:\nbefore %s\nafter  %s", bj, aj)
	}
	if got := p.QemuPid(); got != qpid {
		t.Errorf("QEMU pid %d -> %d after repeated Syncs", qpid, got)
	}
	if strings.Count(p.Console(), testguest.MarkerBooted) != 1 {
		t.Errorf("guest booted more than once")
	}
	checkStats(t, ctx, c, v, "default_life")
	// KubeVirt's words: "QEMU 7.2.22".
	if ver, err := c.GetQemuVersion(ctx); err != nil || !strings.HasPrefix(ver, "QEMU ") || strings.Count(ver, ".") != 2 {
		t.Errorf("GetQemuVersion: %q %v", ver, err)
	}
	checkNothingToDo(t, ctx, c, v)

	// Pause is the user's: a Sync does not resume it; Unpause does.
	if err := c.Pause(ctx, v); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	waitStatus(t, ctx, c, "Paused", "User")
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync while paused: %v", err)
	}
	if d, _, _ := c.GetDomain(ctx); d.Status.Status != "Paused" {
		t.Errorf("Sync resumed a domain the user paused: %s/%s", d.Status.Status, d.Status.Reason)
	}
	if err := c.Unpause(ctx, v); err != nil {
		t.Fatalf("Unpause: %v", err)
	}
	waitStatus(t, ctx, c, "Running", "Unknown")
	// Another VMI is refused.
	other := p.VMI("other")
	other.UID = "00000000-0000-0000-0000-000000000001"
	if err := c.Sync(ctx, other, nil); err == nil || !strings.Contains(err.Error(), "uid") {
		t.Errorf("Sync of a VMI with another uid: %v, want a refusal", err)
	}

	// kill -9 of the libvirt daemon: it comes back, QEMU keeps running.
	daemon := childNamed(t, launcherPid(t, p), "libvirtd", "virtqemud")
	launchertest.Must(t, syscall.Kill(daemon, syscall.SIGKILL))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if nd := childNamedOrZero(launcherPid(t, p), "libvirtd", "virtqemud"); nd != 0 && nd != daemon {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("libvirt daemon not restarted:\n%s", p.Stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !launchertest.Alive(qpid) {
		t.Fatalf("QEMU died with the libvirt daemon")
	}
	// The launcher reconnected: a Sync goes through the new daemon.
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync after daemon restart: %v", err)
	}
	if d, exists, err := c.GetDomain(ctx); err != nil || !exists || d.Status.Status != "Running" {
		t.Fatalf("after daemon restart: exists=%v err=%v status=%+v", exists, err, d.Status)
	}

	// SIGTERM: the guest powers itself off (ACPI), status 0.
	t2 := time.Now()
	p.Signal(syscall.SIGTERM)
	p.WaitConsole(testguest.MarkerPowerButton, 60*time.Second)
	p.WaitConsole(testguest.MarkerPowerOff, 30*time.Second)
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit status %d after graceful shutdown, want 0:\n%s", code, p.Stderr.String())
	}
	t.Logf("SIGTERM -> monitor exit: %v", time.Since(t2))
	p.AssertNothingLeft()
	if got := launchertest.SHA256File(t, p.Layout.ContainerDiskImage(0)); got != backing {
		t.Errorf("container disk image changed: %s -> %s", backing, got)
	}
	for _, s := range []string{p.Layout.ReadySocket(), p.Layout.InitSocket()} {
		if _, err := os.Stat(s); err == nil {
			t.Errorf("socket %s left behind", s)
		}
	}
}

// launcherPid is the monitor's child virt-launcher.
func launcherPid(t *testing.T, p *pod) int {
	t.Helper()
	return childNamed(t, p.Cmd.Process.Pid, "virt-launcher")
}

func childNamed(t *testing.T, parent int, names ...string) int {
	t.Helper()
	if pid := childNamedOrZero(parent, names...); pid != 0 {
		return pid
	}
	t.Fatalf("no child %v of %d", names, parent)
	return 0
}

func childNamedOrZero(parent int, names ...string) int {
	for _, q := range launchertest.AllProcs() {
		if q.PPID == parent && q.State != "Z" && slices.Contains(names, q.Comm) {
			return q.PID
		}
	}
	return 0
}

// waitStatus waits until GetDomain reports status/reason (events update the
// launcher's cache asynchronously).
func waitStatus(t *testing.T, ctx context.Context, c *cmdclient.Client, status, reason string) {
	t.Helper()
	// Generous: some statuses wait for the guest to boot and act (an I/O
	// error needs its user-data to fill a disk), and TCG guests of parallel
	// tests on two cores boot slowly. It returns as soon as the status is there.
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, exists, err := c.GetDomain(ctx)
		if err == nil && exists && d.Status.Status == status && d.Status.Reason == reason {
			return
		}
		if time.Now().After(deadline) {
			if d != nil {
				t.Fatalf("status %s/%s (exists %v, err %v), want %s/%s", d.Status.Status, d.Status.Reason, exists, err, status, reason)
			}
			t.Fatalf("no domain (err %v), want %s/%s", err, status, reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
