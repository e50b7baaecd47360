//go:build e2e

package e2e_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/e2e/cluster"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// vcpuThreadName is QEMU's name for a vCPU thread (TCG here, KVM elsewhere).
var vcpuThreadName = regexp.MustCompile(`^CPU (\d+)/(KVM|TCG)$`)

// TestDedicatedCPU: a VMI with dedicatedCpuPlacement in the real cluster.
// Node 2's kubelet runs the static CPU manager policy (CPU 0 reserved,
// e2e/cluster: staticCPUManager); with KubeVirt's CPUManager gate its
// virt-handler labels it cpumanager=true, virt-controller gives the VMI's
// pod Guaranteed resources and a cpumanager=true node selector, and the
// kubelet gives the compute container a CPU of its own. Our launcher
// reads that CPU set from its cgroup and pins the vCPU to it: the domain
// has the vcpupin, and QEMU's vCPU thread (read from /proc on the
// machine) may run on exactly the CPU the kubelet's CPU manager assigned
// to the compute container, which is its cgroup's cpuset and not the
// reserved CPU. With one CPU in that cpuset an unpinned vCPU thread may
// run on that CPU alone too, so the affinity shows the kubelet's and the
// cgroup's part, and the domain's vcpupin the launcher's (against a
// launcher that did not pin, the vcpupin check failed and the affinity
// was the same).
func TestDedicatedCPU(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	if err := env.SetFeatureGate(ctx, "CPUManager", true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.SetFeatureGate(context.Background(), "CPUManager", false) })
	// virt-handler labels the node on its heartbeat (every 1–2 min).
	start := time.Now()
	if _, err := env.KubectlTimeout(ctx, 4*time.Minute, "wait", "node/"+cluster.Node2Name,
		"--for", "jsonpath={.metadata.labels.cpumanager}=true", "--timeout=3m"); err != nil {
		t.Fatalf("node %s not labelled cpumanager=true by its virt-handler: %v", cluster.Node2Name, err)
	}
	t.Logf("node %s labelled cpumanager=true %v after the gate", cluster.Node2Name, time.Since(start).Round(time.Second))
	if l := ok(env.Kubectl(ctx, "get", "node", cluster.NodeName, "-o", "jsonpath={.metadata.labels.cpumanager}")); l == "true" {
		t.Errorf("node %s (CPU manager policy none) is labelled cpumanager=true", cluster.NodeName)
	}

	const name = "vmi-dedicated"
	vmi := guestVMI(name)
	vmi.DedicatedCores, vmi.Memory, vmi.MemoryLimit = 1, "256Mi", "256Mi"
	ok(env.KubectlStdin(ctx, vmi.YAML(), "create", "-f", "-"))
	t.Cleanup(func() { env.Kubectl(context.Background(), "delete", "vmi", name, "--ignore-not-found", "--wait=false") })
	env.WaitReady(t, ctx, name)
	pod := env.LauncherPod(t, ctx, name)
	if node := ok(env.Kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}")); node != cluster.Node2Name {
		t.Fatalf("the launcher pod runs on %s, want %s (the only node with the static CPU manager policy)", node, cluster.Node2Name)
	}
	if qos := ok(env.Kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.status.qosClass}")); qos != "Guaranteed" {
		t.Errorf("the launcher pod's QoS class is %q, want Guaranteed", qos)
	}
	env.WaitConsoleCount(t, ctx, pod, testguest.MarkerReady, 1)

	// The kubelet's assignment: node 2's cpu_manager_state.
	podUID := ok(env.Kubectl(ctx, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}"))
	var state struct {
		PolicyName    string                       `json:"policyName"`
		DefaultCPUSet string                       `json:"defaultCpuSet"`
		Entries       map[string]map[string]string `json:"entries"`
	}
	statePath := filepath.Join(cluster.Node2HostPath(cluster.KubeletDir), "cpu_manager_state")
	b, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &state); err != nil {
		t.Fatalf("%s: %v", statePath, err)
	}
	assigned := state.Entries[podUID]["compute"]
	t.Logf("node %s cpu_manager_state: policy %s, shared pool %q, compute container of %s: %q", cluster.Node2Name, state.PolicyName, state.DefaultCPUSet, pod, assigned)
	dedicated, err := hostcpu.ParseList(assigned)
	if err != nil || len(dedicated) != 1 {
		t.Fatalf("the CPU manager assigned %q to the compute container (%v), want one CPU; state: %s", assigned, err, b)
	}
	if shared, _ := hostcpu.ParseList(state.DefaultCPUSet); slices.Contains(shared, dedicated[0]) {
		t.Errorf("CPU %d is the compute container's and still in the shared pool %q", dedicated[0], state.DefaultCPUSet)
	}
	want := hostcpu.FormatList(dedicated)

	// The compute container's cgroup cpuset, as the launcher and QEMU
	// in it have it.
	uid := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.metadata.uid}"))
	launcher, qemu := launcherProcesses(t, uid, "default_"+name)
	sys := hostcpu.Sys{Root: "/"}
	for what, pid := range map[string]int{"the launcher": launcher, "QEMU": qemu} {
		cpus, file, err := sys.OwnCPUSet(strconv.Itoa(pid))
		if err != nil {
			t.Fatalf("cpuset of %s (pid %d): %v", what, pid, err)
		}
		if got := hostcpu.FormatList(cpus); got != want {
			t.Errorf("the cpuset of %s (pid %d, %s) is %s, want the compute container's CPU %s", what, pid, file, got, want)
		}
	}

	// The domain's pinning and where QEMU's vCPU thread may run.
	xmlOut := ok(env.Kubectl(ctx, "exec", pod, "-c", "compute", "--", "virsh", "-c", "qemu:///session?socket=/var/run/libvirt/libvirt-sock", "dumpxml", "default_"+name))
	var dom struct {
		VCPUPin []struct {
			VCPU   string `xml:"vcpu,attr"`
			CPUSet string `xml:"cpuset,attr"`
		} `xml:"cputune>vcpupin"`
	}
	if err := xml.Unmarshal([]byte(xmlOut), &dom); err != nil {
		t.Fatalf("virsh dumpxml: %v", err)
	}
	if len(dom.VCPUPin) != 1 || dom.VCPUPin[0].VCPU != "0" || dom.VCPUPin[0].CPUSet != want {
		t.Errorf("the domain's vcpupin %+v, want vCPU 0 on CPU %s", dom.VCPUPin, want)
	}
	threads, err := procfs.Threads("/proc", qemu)
	if err != nil {
		t.Fatal(err)
	}
	var vcpus []procfs.Thread
	for _, th := range threads {
		if vcpuThreadName.MatchString(th.Comm) {
			vcpus = append(vcpus, th)
		}
	}
	if len(vcpus) != 1 || vcpus[0].Allowed != want {
		t.Errorf("QEMU's vCPU threads %+v, want one that may run on CPU %s only", vcpus, want)
	} else {
		t.Logf("QEMU (pid %d) vCPU thread %d %q: Cpus_allowed_list %s", qemu, vcpus[0].TID, vcpus[0].Comm, vcpus[0].Allowed)
	}

	if out := env.Console(t, ctx, name, "echo VL-CPUS-$(nproc)X", "VL-CPUS-1X"); !strings.Contains(out, "VL-CPUS-1X") {
		t.Errorf("the guest does not answer with one CPU on its console:\n%s", out)
	}
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vmi", name, "--wait=true", "--timeout=90s"))
}
