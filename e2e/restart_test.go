//go:build e2e

package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestLauncherKilledVMILives: the virt-launcher process of a running VMI
// is SIGKILLed from the host, as an OOM kill or a crash would end it. The
// pod's monitor starts a new launcher, which takes the guest back: for two
// minutes the VMI stays Running in the same pod with the same QEMU, its
// guest counting on without booting again; then KubeVirt's own machinery
// pauses and unpauses it, reaches its console and live-migrates it through
// the new launcher, and a volume is hotplugged into it and unplugged.
// (KubeVirt's launcher fails the VMI here; TestLauncherKilledRestartsOff
// is that control.)
func TestLauncherKilledVMILives(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	// The migration at the end needs it with v1.8.2 (TestLiveMigration says why).
	for _, gate := range []string{"ImageVolume", "HotplugVolumes"} {
		if err := env.SetFeatureGate(ctx, gate, true); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { env.SetFeatureGate(context.Background(), gate, false) })
	}
	const claim, serial = "pvc-lkill", "VLE2ELK"
	createPVC(t, ctx, claim, "ReadWriteOnce", func(img string) error { return os.WriteFile(img, make([]byte, 16<<20), 0o644) })
	name := "vmi-lkill"
	ok(env.KubectlStdin(ctx, guestVMI(name, testguest.CounterScript).VMYAML("Halted"), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vm", name, "--ignore-not-found", "--wait=false") })
	ok(env.Virtctl(ctx, time.Minute, "start", name))
	env.WaitPrintable(t, ctx, name, "Running")
	env.WaitReady(t, ctx, name)
	pod := env.LauncherPod(t, ctx, name)
	uid := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.metadata.uid}"))
	waitCounts(t, ctx, pod, "10 counts", func(c []int) bool { return len(c) >= 10 })

	launcher, qemu := launcherProcesses(t, uid, "default_"+name)
	if err := syscall.Kill(launcher, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("SIGKILLed the launcher (pid %d) of %s; its QEMU is pid %d", launcher, name, qemu)

	// Two minutes: Running, the same pod and QEMU, a new launcher.
	for time.Since(killed) < 2*time.Minute {
		phase := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.phase}"))
		if phase != "Running" {
			t.Fatalf("%v after the kill the VMI is %q", time.Since(killed).Round(time.Second), phase)
		}
		if now := env.LauncherPod(t, ctx, name); now != pod {
			t.Fatalf("the VMI moved to pod %s (was %s)", now, pod)
		}
		if st, err := procfs.ReadStat("/proc", qemu); err != nil || st.State == 'Z' {
			t.Fatalf("QEMU (pid %d) ended %v after the launcher's kill", qemu, time.Since(killed).Round(time.Second))
		}
		time.Sleep(5 * time.Second)
	}
	if again, _ := launcherProcesses(t, uid, "default_"+name); again == launcher {
		t.Fatalf("the launcher is still pid %d", launcher)
	}
	log := waitCounts(t, ctx, pod, "counts after the kill", func(c []int) bool { return len(c) >= 100 })
	if n := testguest.CountMarker(log, testguest.MarkerReady); n != 1 {
		t.Errorf("%d ready markers on the guest's console, want 1 (it booted again)", n)
	}

	ok(env.Virtctl(ctx, time.Minute, "pause", "vmi", name))
	env.WaitCondition(t, ctx, "vmi/"+name, "Paused", true)
	ok(env.Virtctl(ctx, time.Minute, "unpause", "vmi", name))
	env.WaitCondition(t, ctx, "vmi/"+name, "Paused", false)
	if out := env.Console(t, ctx, name, "echo VL-CONSOLE-$((6*7))", "VL-CONSOLE-42"); !strings.Contains(out, "VL-CONSOLE-42") {
		t.Errorf("virtctl console after the restart: the guest did not answer; got:\n%s", out)
	}
	find := addVolume(t, ctx, name, claim, serial)
	if out := env.Console(t, ctx, name, find+`; echo VL-E2E-LK-${d:-none}X`, "VL-E2E-LK-sd"); !strings.Contains(out, "VL-E2E-LK-sd") {
		t.Fatalf("the guest does not see the disk hotplugged after the restart:\n%s", out)
	}
	removeVolume(t, ctx, name, claim, find)
	_, _, vmim, took := migrateCounting(t, ctx, name)
	t.Logf("after the restart: virtctl migrate -> %s Succeeded in %v", vmim, took)
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vm", name, "--wait=true", "--timeout=90s"))
}

// TestLauncherKilledRestartsOff: the control. A VMI whose annotation
// switches the launcher restarts off (virtlauncher.io/launcher-restarts:
// off) loses its guest with its launcher, as every VMI does with
// KubeVirt's own: the pod's monitor stops QEMU and ends the pod, and
// KubeVirt fails the VMI.
func TestLauncherKilledRestartsOff(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	name := "vmi-lkill-off"
	vmi := guestVMI(name)
	vmi.Annotations = map[string]string{"virtlauncher.io/launcher-restarts": "off"}
	ok(env.KubectlStdin(ctx, vmi.YAML(), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vmi", name, "--ignore-not-found", "--wait=false") })
	env.WaitReady(t, ctx, name)
	uid := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.metadata.uid}"))
	launcher, qemu := launcherProcesses(t, uid, "default_"+name)
	if err := syscall.Kill(launcher, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for {
		phase := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.phase}"))
		if phase == "Failed" {
			break
		}
		if time.Since(killed) > 3*time.Minute {
			t.Fatalf("3 minutes after its launcher's kill the VMI is %q, want Failed", phase)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("the VMI Failed %v after its launcher's kill", time.Since(killed).Round(time.Second))
	if st, err := procfs.ReadStat("/proc", qemu); err == nil && st.State != 'Z' {
		t.Errorf("QEMU (pid %d) outlived its launcher with restarts off", qemu)
	}
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vmi", name, "--wait=true", "--timeout=90s"))
}

// launcherProcesses finds, among the host's processes, the launcher of the
// VMI with uid (its command line names it) and the QEMU of the domain.
func launcherProcesses(t *testing.T, uid, domain string) (launcher, qemu int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		switch base := filepath.Base(args[0]); {
		case base == "virt-launcher" && strings.Contains(string(cmd), "\x00"+uid+"\x00"):
			launcher = pid
		case strings.HasPrefix(base, "qemu-system") && strings.Contains(string(cmd), "guest="+domain+","):
			qemu = pid
		}
	}
	if launcher == 0 || qemu == 0 {
		t.Fatalf("no launcher (%d) or QEMU (%d) of VMI %s on the host", launcher, qemu, uid)
	}
	return launcher, qemu
}
