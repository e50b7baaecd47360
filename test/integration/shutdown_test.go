package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// bootPod starts a pod, syncs the test VMI over gRPC and waits until the
// guest is up.
func bootPod(t *testing.T, name string, o podOpts, token string, kernelArgs ...string) *pod {
	t.Helper()
	p := env.New(t, name, o)
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	if err := c.Sync(ctx, p.VMI(token, kernelArgs...), nil); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return p
}

// TestGraceExpiredDestroys: a guest that ignores the ACPI power button is
// destroyed when --grace-period-seconds runs out; the launcher still ends
// normally (status 0) and leaves nothing behind.
func TestGraceExpiredDestroys(t *testing.T) {
	t.Parallel()
	p := bootPod(t, "noacpi", podOpts{Grace: 4, SharedCaps: true}, "noacpi-1", testguest.OptNoACPI)
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	qpid := p.QemuPid()
	t0 := time.Now()
	p.Signal(syscall.SIGTERM)
	p.WaitConsole(testguest.MarkerACPIIgnored, 30*time.Second)
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	took := time.Since(t0)
	t.Logf("SIGTERM -> exit with a guest ignoring ACPI: %v (grace 4s)", took)
	if took < 4*time.Second {
		t.Errorf("exited after %v, before the 4 s grace period", took)
	}
	if strings.Contains(p.Console(), testguest.MarkerPowerOff) {
		t.Errorf("guest powered off although it ignores ACPI")
	}
	if !strings.Contains(p.Stderr.String(), "grace period over") {
		t.Errorf("launcher did not report destroying the domain")
	}
	if launchertest.Alive(qpid) {
		t.Errorf("QEMU %d still alive", qpid)
	}
	p.AssertNothingLeft()
}

// TestQemuTimeout: no domain is ever defined, so the launcher gives up
// after --qemu-timeout with a fatal status.
func TestQemuTimeout(t *testing.T) {
	t.Parallel()
	p := env.New(t, "nodomain", podOpts{QemuTimeout: 3 * time.Second})
	p.WaitReady(30 * time.Second)
	t0 := time.Now()
	if code := p.ExitCode(30 * time.Second); code != 2 {
		t.Fatalf("exit status %d, want 2", code)
	}
	t.Logf("ready -> exit without a domain: %v (qemu-timeout 3s)", time.Since(t0))
	if !strings.Contains(p.Stderr.String(), "no domain was defined within --qemu-timeout") {
		t.Errorf("no qemu-timeout message in the log")
	}
	p.AssertNothingLeft()
}

// TestQemuKilled: QEMU dying under the launcher (SIGKILL) makes launcher
// and monitor exit with a failure status.
func TestQemuKilled(t *testing.T) {
	t.Parallel()
	p := bootPod(t, "killed", podOpts{SharedCaps: true}, "killed-1")
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	// First a hard reset over gRPC: the guest boots again from the same
	// overlay, which remembers the first boot.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	qpid := p.QemuPid()
	if err := c.Reset(ctx, p.VMI("killed-1")); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	deadline := time.Now().Add(2 * bootTimeout)
	for !strings.Contains(p.Console(), testguest.MarkerBootCount+" 2") {
		if time.Now().After(deadline) {
			t.Fatalf("no second boot after Reset; console:\n%s", p.Console())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p.QemuPid() != qpid {
		t.Errorf("Reset replaced QEMU")
	}
	launchertest.Must(t, syscall.Kill(qpid, syscall.SIGKILL))
	code := p.ExitCode(60 * time.Second)
	if code == 0 {
		t.Fatalf("exit status 0 after QEMU was killed, want a failure")
	}
	t.Logf("exit status %d after SIGKILL of QEMU", code)
	p.AssertNothingLeft()
}

// TestThreeLaunchers: three pods at once, each guest sees only its own
// user-data and disks, each powers itself off, each launcher exits 0.
func TestThreeLaunchers(t *testing.T) {
	t.Parallel()
	var pods []*pod
	for i := 0; i < 3; i++ {
		pods = append(pods, env.New(t, fmt.Sprintf("three%d", i), podOpts{SharedCaps: true}))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	for i, p := range pods {
		p.WaitReady(30 * time.Second)
		wg.Add(1)
		go func(i int, p *pod) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := p.Client(ctx)
			// Pods 0 and 1 power off by themselves; pod 2 is shut down
			// over gRPC below.
			var args []string
			if i < 2 {
				args = append(args, testguest.OptPowerOff)
			}
			errs[i] = c.Sync(ctx, p.VMI(fmt.Sprintf("three-%d-%s", i, p.UID[:8]), args...), nil)
		}(i, p)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Sync of pod %d: %v", i, err)
		}
	}
	// Pod 2: ShutdownVirtualMachine (ACPI), as virt-handler does; the
	// first one records the deletion timestamp.
	p2 := pods[2]
	p2.WaitConsole(testguest.MarkerReady, 2*bootTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c2 := p2.Client(ctx)
	if err := c2.Shutdown(ctx, p2.VMI("x")); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d, _, err := c2.GetDomain(ctx); err != nil || d.Spec.Metadata.KubeVirt.GracePeriod == nil ||
		d.Spec.Metadata.KubeVirt.GracePeriod.DeletionTimestamp == nil {
		t.Errorf("no deletion timestamp after Shutdown: %v %+v", err, d)
	}
	p2.WaitConsole(testguest.MarkerPowerButton, time.Minute)
	for i, p := range pods {
		p.WaitConsole(testguest.MarkerPowerOff, 2*bootTimeout)
		if code := p.ExitCode(60 * time.Second); code != 0 {
			t.Errorf("pod %d: exit status %d, want 0", i, code)
		}
		out := p.Console()
		for j, q := range pods {
			has := strings.Contains(out, fmt.Sprintf("token three-%d-%s", j, q.UID[:8]))
			if has != (i == j) {
				t.Errorf("pod %d console has pod %d's token: %v", i, j, has)
			}
		}
		if n, _ := testguest.FindMarker(out, testguest.MarkerBootCount); n != "1" {
			t.Errorf("pod %d: boot count %q, want 1", i, n)
		}
		p.AssertNothingLeft()
	}
}

// TestStandaloneVMI: STANDALONE_VMI boots the guest with no client at all,
// and the launcher exits 0 when the guest powers itself off.
func TestStandaloneVMI(t *testing.T) {
	t.Parallel()
	env.Need(t)
	p := env.NewDeferred(t, "standalone", podOpts{SharedCaps: true})
	v := p.VMIYAML("standalone-1", testguest.OptPowerOff)
	p.SetEnv("STANDALONE_VMI", v)
	p.Start()
	p.WaitReady(30 * time.Second)
	p.WaitConsole(testguest.MarkerPowerOff, 2*bootTimeout)
	if !strings.Contains(p.Console(), "token standalone-1") {
		t.Errorf("user-data did not run")
	}
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	p.AssertNothingLeft()
}
