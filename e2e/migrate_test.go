//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/e2e/cluster"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// The scenarios that need the cluster's second node (e2e/cluster/node.go,
// docs/two-node-e2e.md).

// TestSecondNode (stage B of docs/two-node-e2e.md): a VMI pinned to node 2
// runs there, its console reached through node 2's virt-handler and its
// port through a Service from node 1's kube-proxy; node 1's pods are
// untouched by node 2's kubelet (each has its own containerd, cgroup root
// and kubelet directory).
func TestSecondNode(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	nodes := strings.Fields(ok(env.Kubectl(ctx, "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")))
	if len(nodes) != 2 {
		t.Fatalf("nodes %q, want %s and %s", nodes, cluster.NodeName, cluster.Node2Name)
	}
	handlers := ok(env.Kubectl(ctx, "-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-handler", "-o", "jsonpath={.items[*].spec.nodeName}"))
	for _, n := range nodes {
		if !strings.Contains(handlers, n) {
			t.Errorf("no virt-handler on node %s (handlers on %q)", n, handlers)
		}
	}
	name := "vmi-node2"
	vmi := guestVMI(name)
	vmi.NodeSelector = map[string]string{"kubernetes.io/hostname": cluster.Node2Name}
	ok(env.KubectlStdin(ctx, vmi.YAML(), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vmi", name, "--ignore-not-found", "--wait=false") })
	env.WaitReady(t, ctx, name)
	if node := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.nodeName}")); node != cluster.Node2Name {
		t.Fatalf("the VMI runs on %q, want %s", node, cluster.Node2Name)
	}
	out := env.Console(t, ctx, name, "echo VL-CONSOLE-$((6*7))", "VL-CONSOLE-42")
	if !strings.Contains(out, "VL-CONSOLE-42") {
		t.Errorf("virtctl console on node 2: the guest did not answer; got:\n%s", out)
	}
	ok(env.Virtctl(ctx, time.Minute, "expose", "vmi", name, "--name", name+"-http", "--port", "8080", "--target-port", "80"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "service", name+"-http", "--ignore-not-found") })
	ip := ok(env.Kubectl(ctx, "get", "service", name+"-http", "-o", "jsonpath={.spec.clusterIP}"))
	if body, err := httpGet(ctx, "http://"+ip+":8080/", time.Minute); err != nil || !strings.Contains(body, "hello from "+name) {
		t.Errorf("GET through the Service %s:8080 to node 2: %q, %v", ip, body, err)
	}
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vmi", name, "--wait=true", "--timeout=90s"))
}

// TestLiveMigration (docs/migration.md §7, stage 4): `virtctl migrate`
// moves a running VM's VMI (containerDisk, kernelBoot container,
// cloud-init, masquerade: a block migration) to the other node through
// KubeVirt's own machinery: virt-controller's migration and target pod,
// both virt-handlers and their TLS proxies, our launcher on both ends. The migration succeeds,
// the VMI is on the other node, its guest counts on from where it was (no
// reboot), its Service still answers, and the source pod completes. Then
// it moves back.
func TestLiveMigration(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	// With KubeVirt's ImageVolume gate (v1.9's default): with it off,
	// v1.8.2's target virt-handler loses its record of the kernelBoot
	// container's mount at its second sync (it wraps the EEXIST of the
	// directory it made at the first, and its os.IsExist check misses it),
	// so after the migration the VMI can never be cleaned up and its VM
	// stays Terminating. KubeVirt's, whatever the launcher; the migration
	// itself succeeds (docs/migration.md §7, stage 4).
	if err := env.SetFeatureGate(ctx, "ImageVolume", true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.SetFeatureGate(context.Background(), "ImageVolume", false) })
	name := "vmi-mig"
	// virtctl migrates VirtualMachines.
	ok(env.KubectlStdin(ctx, guestVMI(name, testguest.CounterScript).VMYAML("Halted"), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vm", name, "--ignore-not-found", "--wait=false") })
	ok(env.Virtctl(ctx, time.Minute, "start", name))
	// The VM's status polls without failing while its VMI is not made yet.
	env.WaitPrintable(t, ctx, name, "Running")
	env.WaitReady(t, ctx, name)
	cond := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", `jsonpath={.status.conditions[?(@.type=="LiveMigratable")].status} {.status.conditions[?(@.type=="LiveMigratable")].message}`))
	if !strings.HasPrefix(cond, "True") {
		t.Fatalf("the VMI is not LiveMigratable: %s", cond)
	}
	ok(env.Virtctl(ctx, time.Minute, "expose", "vmi", name, "--name", name+"-http", "--port", "8080", "--target-port", "80"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "service", name+"-http", "--ignore-not-found") })
	ip := ok(env.Kubectl(ctx, "get", "service", name+"-http", "-o", "jsonpath={.spec.clusterIP}"))

	for round := 1; round <= 2; round++ {
		from, src, vmim, took := migrateCounting(t, ctx, name)
		t.Logf("round %d: virtctl migrate -> %s Succeeded in %v", round, vmim, took)

		st := getObject[v1.VirtualMachineInstance](t, ctx, "vmi", name)
		if st.Status.MigrationState == nil {
			t.Fatalf("round %d: the VMI has no migration state", round)
		}
		ms := st.Status.MigrationState
		if !ms.Completed || ms.Failed || ms.SourceNode != from || ms.TargetNode == from || st.Status.NodeName != ms.TargetNode || ms.StartTimestamp == nil || ms.EndTimestamp == nil {
			t.Fatalf("round %d: the VMI's migration state %+v on node %s, want completed, from %s to the other node", round, ms, st.Status.NodeName, from)
		}
		t.Logf("round %d: %s -> %s, mode %s, %v", round, ms.SourceNode, ms.TargetNode, ms.Mode, ms.EndTimestamp.Sub(ms.StartTimestamp.Time))

		// The guest ran on: the target's console begins near where the
		// source's ended, and the guest did not boot again.
		srcLog := ok(env.Kubectl(ctx, "logs", src, "-c", "guest-console-log"))
		last := testguest.Counts(srcLog)
		dst := podOn(t, ctx, name, ms.TargetNode)
		want := last[len(last)-1] + 20
		dstLog := waitCounts(t, ctx, dst, fmt.Sprintf("a count of %d", want), func(c []int) bool { return len(c) > 0 && c[len(c)-1] >= want })
		after := testguest.Counts(dstLog)
		if after[0] > last[len(last)-1]+30 || after[0] < last[len(last)-1]-30 {
			t.Errorf("round %d: the target's console begins at count %d; the source's ended at %d", round, after[0], last[len(last)-1])
		}
		if _, booted := testguest.FindMarker(dstLog, testguest.MarkerReady); booted {
			t.Errorf("round %d: the guest booted again on the target:\n%s", round, launchertest.Tail(dstLog, 2000))
		}

		// The Service now reaches the guest on the other node.
		if body, err := httpGet(ctx, "http://"+ip+":8080/", time.Minute); err != nil || !strings.Contains(body, "hello from "+name) {
			t.Errorf("round %d: GET through the Service after the migration: %q, %v", round, body, err)
		}
		// The source pod completes (its launcher exits 0).
		if _, err := env.KubectlTimeout(ctx, 3*time.Minute, "wait", "pod/"+src, "--for", "jsonpath={.status.phase}=Succeeded", "--timeout=2m"); err != nil {
			phase, _ := env.Kubectl(ctx, "get", "pod", src, "-o", "jsonpath={.status.phase} {.status.containerStatuses[*].state}")
			t.Errorf("round %d: the source pod %s did not complete: %v (%s)", round, src, err, phase)
		}
	}
	migrationCancelled(t, ctx, name)
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vm", name, "--wait=true", "--timeout=90s"))
}

// slowPolicy caps the bandwidth of the migrations of the VMIs labelled
// vl-e2e-slow=true at 1 MiB/s: the test guest's migration then takes
// minutes, long enough to cancel it midway.
const slowPolicy = `apiVersion: migrations.kubevirt.io/v1alpha1
kind: MigrationPolicy
metadata:
  name: vl-e2e-slow
spec:
  bandwidthPerMigration: 1Mi
  selectors:
    virtualMachineInstanceSelector:
      vl-e2e-slow: "true"
`

// migrationCancelled: `virtctl migrate-cancel` on a migration under way (a
// MigrationPolicy slows it down) reaches the source's launcher as
// CancelVirtualMachineMigration through KubeVirt's machinery: the
// migration is aborted, the VMI stays on its node with the abort in its
// migration state, and its guest counts on in the same pod.
func migrationCancelled(t *testing.T, ctx context.Context, name string) {
	ok := must(t)
	ok(env.KubectlStdin(ctx, slowPolicy, "create", "-f", "-"))
	t.Cleanup(func() {
		env.Kubectl(context.Background(), "delete", "migrationpolicy", "vl-e2e-slow", "--ignore-not-found")
	})
	ok(env.Kubectl(ctx, "label", "vmi", name, "vl-e2e-slow=true"))
	from := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.nodeName}"))
	src := podOn(t, ctx, name, from)
	ok(env.Virtctl(ctx, time.Minute, "migrate", name))
	vmim := waitMigrationPhase(t, ctx, name, "Running", 3*time.Minute)
	// The migration moves data: the source's launcher reports progress.
	time.Sleep(5 * time.Second)
	if p := ok(env.Kubectl(ctx, "get", "vmim", vmim, "-o", "jsonpath={.status.phase}")); p != "Running" {
		t.Fatalf("the slowed migration %s is %s after 5 s, want still Running", vmim, p)
	}
	ok(env.Virtctl(ctx, time.Minute, "migrate-cancel", name))
	deadline := time.Now().Add(3 * time.Minute)
	var ms *v1.VirtualMachineInstanceMigrationState
	for {
		st := getObject[v1.VirtualMachineInstance](t, ctx, "vmi", name)
		ms = st.Status.MigrationState
		if ms != nil && string(ms.MigrationUID) != "" && ms.AbortStatus == v1.MigrationAbortSucceeded && ms.EndTimestamp != nil {
			if st.Status.NodeName != from || ms.Completed {
				t.Fatalf("after the cancel the VMI is on %s, migration state %+v; want it on %s, not completed", st.Status.NodeName, ms, from)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(env.Explain(ctx, "default", fmt.Errorf("no aborted migration in the VMI's state 3 min after virtctl migrate-cancel: %+v", ms)))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("cancelled: %s, abort %s, failed %v, on %s", vmim, ms.AbortStatus, ms.Failed, from)
	// The guest runs on in the same pod.
	log := ok(env.Kubectl(ctx, "logs", src, "-c", "guest-console-log"))
	c := testguest.Counts(log)
	want := c[len(c)-1] + 20
	waitCounts(t, ctx, src, fmt.Sprintf("a count of %d in the source pod after the cancel", want), func(c []int) bool { return len(c) > 0 && c[len(c)-1] >= want })
	if got := podOn(t, ctx, name, from); got != src {
		t.Errorf("after the cancel the VMI's pod on %s is %s, want %s", from, got, src)
	}
}

// migrateCounting waits until the VMI's guest has counted 20 on its
// console (testguest.CounterScript), runs `virtctl migrate` and waits for
// the migration to succeed. It returns the node and pod the VMI left, the
// migration's name and how long it took.
func migrateCounting(t *testing.T, ctx context.Context, name string) (from, src, vmim string, took time.Duration) {
	t.Helper()
	ok := must(t)
	from = ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.nodeName}"))
	src = podOn(t, ctx, name, from)
	waitCounts(t, ctx, src, "20 counts", func(c []int) bool { return len(c) >= 20 })
	start := time.Now()
	ok(env.Virtctl(ctx, time.Minute, "migrate", name))
	vmim = waitMigrationDone(t, ctx, name, 5*time.Minute)
	return from, src, vmim, time.Since(start).Round(100 * time.Millisecond)
}

// waitCounts waits (2 min at most) until the counts on the pod's guest
// console log (testguest.CounterScript) satisfy until, described by what,
// and returns the log.
func waitCounts(t *testing.T, ctx context.Context, pod, what string, until func([]int) bool) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log, err := env.Kubectl(ctx, "logs", pod, "-c", "guest-console-log")
		if err == nil && until(testguest.Counts(log)) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: no %s on the guest console in 2 min (%v):\n%s", pod, what, err, launchertest.Tail(log, 2000))
		}
		time.Sleep(2 * time.Second)
	}
}

// podOn is the VMI's launcher pod on node (there are two while and after
// it migrates).
func podOn(t *testing.T, ctx context.Context, vmi, node string) string {
	t.Helper()
	uid := must(t)(env.Kubectl(ctx, "get", "vmi", vmi, "-o", "jsonpath={.metadata.uid}"))
	out := must(t)(env.Kubectl(ctx, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "--field-selector", "spec.nodeName="+node,
		"-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}"))
	var running []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && (f[1] == "Running" || f[1] == "Pending") {
			running = append(running, f[0])
		}
	}
	if len(running) != 1 {
		t.Fatalf("VMI %s: launcher pods on %s: %q, want one running", vmi, node, out)
	}
	return running[0]
}

// waitMigrationDone waits for the VMI's newest migration to reach
// Succeeded, failing t when it fails, and returns its name.
func waitMigrationDone(t *testing.T, ctx context.Context, vmi string, within time.Duration) string {
	t.Helper()
	return waitMigrationPhase(t, ctx, vmi, "Succeeded", within)
}

// waitMigrationPhase waits for the VMI's newest migration to reach phase,
// failing t when it fails first, and returns its name.
func waitMigrationPhase(t *testing.T, ctx context.Context, vmi, phase string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		out, err := env.Kubectl(ctx, "get", "vmim", "-o", "jsonpath={range .items[?(@.spec.vmiName==\""+vmi+"\")]}{.metadata.creationTimestamp} {.metadata.name} {.status.phase}{\"\\n\"}{end}")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		// RFC 3339 timestamps sort as text; the newest is last.
		newest := ""
		for _, l := range lines {
			if l > newest {
				newest = l
			}
		}
		last = newest
		if f := strings.Fields(newest); len(f) == 3 {
			switch f[2] {
			case phase:
				return f[1]
			case "Failed":
				state, _ := env.Kubectl(ctx, "get", "vmi", vmi, "-o", "jsonpath={.status.migrationState}")
				t.Fatal(env.Explain(ctx, "default", fmt.Errorf("migration %s of %s failed; the VMI's migration state: %s", f[1], vmi, state)))
			}
		}
		time.Sleep(time.Second)
	}
	state, _ := env.Kubectl(ctx, "get", "vmi", vmi, "-o", "jsonpath={.status.migrationState}")
	t.Fatal(env.Explain(ctx, "default", fmt.Errorf("the migration of %s did not reach %s in %v: %s; the VMI's migration state: %s", vmi, phase, within, last, state)))
	return ""
}

// TestSharedDiskMigration (stage D of docs/two-node-e2e.md): a VM
// whose root disk is a ReadWriteMany PVC (a hostPath PV: both nodes are
// this machine, so it is truly shared) migrates without copying any disk
// (KubeVirt's LiveMigration method, not BlockMigration): the guest counts
// on in the target pod without booting again, and the count of its boots,
// kept on that disk, stays 1. libvirt only leaves a disk uncopied on a
// network file system, so the cluster's admin setting for such storage,
// migrations.unsafeMigrationOverride, is on for the test.
func TestSharedDiskMigration(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	if err := env.PatchConfiguration(ctx, "unsafeMigrationOverride on", map[string]any{"migrations": map[string]any{"unsafeMigrationOverride": true}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.PatchConfiguration(context.Background(), "unsafeMigrationOverride off", map[string]any{"migrations": map[string]any{"unsafeMigrationOverride": false}})
	})
	const name, claim = "vm-shared", "pvc-shared"
	createPVC(t, ctx, claim, "ReadWriteMany", guest.Guest.CopyRootDisk)
	t.Cleanup(func() {
		env.Kubectl(context.Background(), "delete", "vm", name, "--ignore-not-found", "--wait=true", "--timeout=90s")
	})
	vmi := guestVMI(name, testguest.CounterScript)
	// Any disk but a shared PVC, hostDisk or read-only CD-ROM makes
	// KubeVirt copy it (block migration): the cloud-init disk is a CD-ROM.
	vmi.RootClaim, vmi.UserDataCDROM = claim, true
	ok(env.KubectlStdin(ctx, vmi.VMYAML("Halted"), "create", "-f", "-"))
	ok(env.Virtctl(ctx, time.Minute, "start", name))
	env.WaitPrintable(t, ctx, name, "Running")
	env.WaitReady(t, ctx, name)
	if m := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.migrationMethod}")); m != string(v1.LiveMigration) {
		why := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", `jsonpath={.status.conditions[?(@.type=="LiveMigratable")]} {.status.volumeStatus}`))
		handlers, _ := env.Kubectl(ctx, "-n", "kubevirt", "logs", "-l", "kubevirt.io=virt-handler", "--tail=-1")
		t.Fatalf("the VMI's migration method is %q, want %s (no disk to copy): %s\nvirt-handler: %s", m, v1.LiveMigration, why, lineWithAll(handlers, "block migration"))
	}
	from, src, vmim, took := migrateCounting(t, ctx, name)
	to := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.nodeName}"))
	if to == from {
		t.Fatalf("after %s the VMI is still on %s", vmim, from)
	}
	t.Logf("virtctl migrate -> %s Succeeded in %v, %s -> %s", vmim, took, from, to)
	srcLog := ok(env.Kubectl(ctx, "logs", src, "-c", "guest-console-log"))
	last := testguest.Counts(srcLog)
	dst := podOn(t, ctx, name, to)
	want := last[len(last)-1] + 20
	dstLog := waitCounts(t, ctx, dst, fmt.Sprintf("a count of %d", want), func(c []int) bool { return len(c) > 0 && c[len(c)-1] >= want })
	if _, booted := testguest.FindMarker(dstLog, testguest.MarkerReady); booted {
		t.Errorf("the guest booted again on the target:\n%s", launchertest.Tail(dstLog, 2000))
	}
	if n, found := testguest.FindMarker(srcLog, testguest.MarkerBootCount); !found || n != "1" {
		t.Errorf("boot count on the shared disk %q (found %v), want 1", n, found)
	}
	// The target's launcher copied no disk: a shared-storage migration.
	if out, _ := env.Kubectl(ctx, "logs", src, "-c", "compute"); !strings.Contains(out, `"disks":null`) && !strings.Contains(out, `"disks":[]`) {
		t.Errorf("the source's launcher does not say it copies no disk:\n%s", launchertest.Tail(lineWithAll(out, "migrat", "disks"), 2000))
	}
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vm", name, "--wait=true", "--timeout=90s"))
}

// lineWithAll are the lines of s that hold every one of subs.
func lineWithAll(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(l, sub)
		}
		if all {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
