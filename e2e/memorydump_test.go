//go:build e2e

package e2e_test

import (
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestMemoryDump is `virtctl memory-dump get VM --claim-name=... --create-claim`
// as KubeVirt documents it, on a running VM: virtctl creates the PVC,
// virt-controller hotplugs it as a memory dump volume, virt-handler mounts
// it into our launcher pod and asks the launcher for the dump, and the VM's
// status.memoryDumpRequest goes to Completed with the dump's file name.
// The suite stands in for a provisioner: a static hostPath PV waiting for
// that claim. The file on it is an ELF core of the guest's memory, the
// guest runs on, and `virtctl memory-dump remove` dissociates the claim.
func TestMemoryDump(t *testing.T) {
	ok := must(t)
	ctx := context.Background()
	const name, claim = "vm-dump", "pvc-dump"
	if err := env.SetFeatureGate(ctx, "HotplugVolumes", true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.SetFeatureGate(context.Background(), "HotplugVolumes", false) })

	// virt-api reads CDI's CDIConfig for the file system overhead (a
	// missing one means KubeVirt's default 5.5 %), but KubeVirt's own
	// RBAC does not let it: CDI's operator grants every authenticated
	// user reading it (its cdi.kubevirt.io:config-reader role). Without
	// CDI the request is refused ("cannot get resource cdiconfigs"), so
	// the suite grants what CDI would.
	ok(env.KubectlStdin(ctx, cdiConfigReader, "apply", "-f", "-"))
	t.Cleanup(func() {
		env.Kubectl(context.Background(), "delete", "clusterrolebinding,clusterrole", "cdi.kubevirt.io:config-reader", "--ignore-not-found")
	})

	// Non-root pods (107) write the dump, as they write a PVC's disk.
	dir := pvDir(t, claim)
	// Bound to the claim virtctl will make (its class: "manual", no
	// StorageClass object, so it binds at once). 1Gi holds the 256Mi
	// guest plus KubeVirt's 100Mi dump overhead and 5.5 % file system
	// overhead (virtctl asks for about 376Mi).
	pv := staticPV(claim, dir, "1Gi", "ReadWriteOnce", "manual", claim)
	ok(env.KubectlStdin(ctx, pv, "create", "-f", "-"))
	t.Cleanup(func() {
		bg := context.Background()
		env.Kubectl(bg, "delete", "vm", name, "--ignore-not-found", "--wait=true", "--timeout=90s")
		env.Kubectl(bg, "delete", "pvc", claim, "--ignore-not-found")
		env.Kubectl(bg, "delete", "pv", claim, "--ignore-not-found")
		os.RemoveAll(dir)
	})

	ok(env.KubectlStdin(ctx, vmYAML(name), "create", "-f", "-"))
	ok(env.Virtctl(ctx, time.Minute, "start", name))
	env.WaitPrintable(t, ctx, name, "Running")
	env.WaitReady(t, ctx, name)
	pod := env.LauncherPod(t, ctx, name)
	env.WaitConsoleCount(t, ctx, pod, testguest.MarkerReady, 1)

	start := time.Now()
	out := ok(env.Virtctl(ctx, 2*time.Minute, "memory-dump", "get", name, "--claim-name="+claim, "--create-claim", "--storage-class=manual"))
	t.Logf("virtctl memory-dump get: %s", strings.TrimSpace(out))
	req := waitMemoryDump(t, ctx, name, func(r *v1.VirtualMachineMemoryDumpRequest) bool {
		return r != nil && r.Phase == v1.MemoryDumpCompleted
	})
	t.Logf("memory dump Completed %v after virtctl memory-dump get", time.Since(start).Round(100*time.Millisecond))
	if req.FileName == nil || *req.FileName == "" {
		t.Fatalf("the Completed memory dump request has no file name: %+v", req)
	}
	file := *req.FileName
	if ann := ok(env.Kubectl(ctx, "get", "pvc", claim, "-o", `jsonpath={.metadata.annotations.kubevirt\.io/memory-dump}`)); ann != file {
		t.Errorf("the PVC's kubevirt.io/memory-dump annotation is %q, want the dump's file %q", ann, file)
	}
	checkELFCore(t, filepath.Join(dir, file), 256<<20)

	// The dump paused the guest only while it ran: it answers still.
	if out := env.Console(t, ctx, name, "echo VL-DUMP-$((6*7))X", "VL-DUMP-42X"); !strings.Contains(out, "VL-DUMP-42X") {
		t.Errorf("after the memory dump the guest does not answer on its console:\n%s", out)
	}
	if phase := ok(env.Kubectl(ctx, "get", "vmi", name, "-o", "jsonpath={.status.phase}")); phase != "Running" {
		t.Errorf("after the memory dump the VMI is %q", phase)
	}
	ok(env.Virtctl(ctx, time.Minute, "memory-dump", "remove", name))
	waitMemoryDump(t, ctx, name, func(r *v1.VirtualMachineMemoryDumpRequest) bool { return r == nil })
	ok(env.KubectlTimeout(ctx, 2*time.Minute, "delete", "vm", name, "--wait=true", "--timeout=90s"))
}

// cdiConfigReader is the role and binding CDI's operator installs so that
// anyone may read its configuration.
const cdiConfigReader = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "cdi.kubevirt.io:config-reader"}
rules:
- apiGroups: [cdi.kubevirt.io]
  resources: [cdiconfigs, storageprofiles]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "cdi.kubevirt.io:config-reader"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "cdi.kubevirt.io:config-reader"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:authenticated"}
`

// waitMemoryDump waits (5 min at most) until the VM's memory dump request
// is as done says; a Failed request ends the test at once.
func waitMemoryDump(t *testing.T, ctx context.Context, vm string, done func(*v1.VirtualMachineMemoryDumpRequest) bool) *v1.VirtualMachineMemoryDumpRequest {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var phases []string
	for {
		v := getObject[v1.VirtualMachine](t, ctx, "vm", vm)
		r := v.Status.MemoryDumpRequest
		phase := "none"
		if r != nil {
			phase = string(r.Phase)
		}
		if len(phases) == 0 || phases[len(phases)-1] != phase {
			phases = append(phases, phase)
		}
		if done(r) {
			t.Logf("memory dump request phases: %s", strings.Join(phases, " → "))
			return r
		}
		if r != nil && r.Phase == v1.MemoryDumpFailed {
			t.Fatalf("memory dump Failed: %s (phases %v)", r.Message, phases)
		}
		if time.Now().After(deadline) {
			ev, _ := env.Kubectl(ctx, "get", "events", "--sort-by=.lastTimestamp")
			t.Fatalf("memory dump request of %s: phases %v in 5 min\nevents:\n%s", vm, phases, ev)
		}
		time.Sleep(time.Second)
	}
}

// checkELFCore checks that path is a memory-only ELF core of a guest with
// at least mem bytes of RAM: ELF magic, ET_CORE, a note segment and load
// segments holding at least mem bytes.
func checkELFCore(t *testing.T, path string, mem uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the dump on the PVC: %v", err)
	}
	defer f.Close()
	head := make([]byte, 18)
	if _, err := f.ReadAt(head, 0); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if string(head[:4]) != "\x7fELF" {
		t.Fatalf("%s starts with %q, not the ELF magic", path, head[:4])
	}
	core, err := elf.NewFile(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var notes int
	var load uint64
	for _, p := range core.Progs {
		switch p.Type {
		case elf.PT_NOTE:
			notes++
		case elf.PT_LOAD:
			load += p.Filesz
		}
	}
	fi, _ := f.Stat()
	t.Logf("%s: %d bytes, %v %v %v, %d program headers, %d MiB in load segments", filepath.Base(path), fi.Size(), core.Class, core.Type, core.Machine, len(core.Progs), load>>20)
	if core.Type != elf.ET_CORE {
		t.Errorf("%s: e_type %v, want ET_CORE (4)", path, core.Type)
	}
	if notes == 0 || load < mem {
		t.Errorf("%s: %d note segments and %d bytes in load segments, want notes and the guest's %d bytes of memory", path, notes, load, mem)
	}
}
