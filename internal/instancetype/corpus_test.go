package instancetype

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/corpus"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// corpusConflicts are KubeVirt's example VMs that name an instancetype and
// also set spec.template.spec.domain.memory.guest: KubeVirt's VM admission
// refuses them with this conflict (its own expansion code says so:
// TestAgainstKubeVirt), and so does vlctl run.
var corpusConflicts = map[string]string{
	"vm-cirros-clarge-virtio.yaml":   `spec.template.spec.domain.memory.guest: set by the VM and by the instancetype VirtualMachineInstancetype "clarge"`,
	"vm-cirros-clarge-windows.yaml":  `spec.template.spec.domain.memory.guest: set by the VM and by the instancetype VirtualMachineInstancetype "clarge"`,
	"vm-cirros-clarge.yaml":          `spec.template.spec.domain.memory.guest: set by the VM and by the instancetype VirtualMachineInstancetype "clarge"`,
	"vm-cirros-cluster-csmall.yaml":  `spec.template.spec.domain.memory.guest: set by the VM and by the instancetype VirtualMachineClusterInstancetype "cluster-csmall"`,
	"vm-cirros-csmall.yaml":          `spec.template.spec.domain.memory.guest: set by the VM and by the instancetype VirtualMachineInstancetype "csmall"`,
	"vm-windows-clarge-windows.yaml": `spec.template.spec.domain.memory.guest: set by the VM and by the instancetype VirtualMachineInstancetype "clarge"`,
}

// TestCorpus runs KubeVirt's example manifests through vlctl run's
// loading, with the instancetypes and preferences of KubeVirt's examples
// given as a second file. The ones naming an instancetype conflict as in
// KubeVirt; without their memory.guest (what the error asks) they load,
// with the instancetype's CPUs and memory.
func TestCorpus(t *testing.T) {
	files := corpus.Files(t)
	types := filepath.Join("testdata", "kubevirt-examples.yaml")
	expanded := 0
	for _, path := range files {
		base := filepath.Base(path)
		_, err := Load([]string{path, types}, "", vmi.Options{})
		want, conflict := corpusConflicts[base]
		if w, other := corpus.OtherKinds[base]; other {
			want = w
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: does not load: %v", base, err)
		case want != "" && err == nil:
			t.Errorf("%s: loaded; want %q", base, want)
		case want != "" && !strings.Contains(err.Error(), want):
			t.Errorf("%s: error %q does not say %q", base, err, want)
		}
		if !conflict {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fixed := filepath.Join(t.TempDir(), base)
		if err := os.WriteFile(fixed, []byte(strings.Replace(string(data), "        memory:\n          guest: 128Mi\n", "", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Load([]string{fixed, types}, "", vmi.Options{})
		if err != nil {
			t.Errorf("%s without memory.guest: %v", base, err)
			continue
		}
		c, m := l.VMI.Spec.Domain.CPU, l.VMI.Spec.Domain.Memory.Guest.String()
		wantCPU, wantMem := uint32(4), "2Gi"
		if strings.Contains(base, "csmall") {
			wantCPU, wantMem = 1, "128Mi"
		}
		if c.Sockets*c.Cores*c.Threads != wantCPU || m != wantMem {
			t.Errorf("%s: %d vCPUs and %s, want %d and %s", base, c.Sockets*c.Cores*c.Threads, m, wantCPU, wantMem)
		}
		if strings.Contains(base, "windows") && (l.VMI.Spec.Domain.Devices.Disks[0].Disk.Bus != "sata" || l.VMI.Spec.Domain.Devices.TPM == nil) {
			t.Errorf("%s: the windows preference is not applied: disk %+v, tpm %v", base, l.VMI.Spec.Domain.Devices.Disks[0], l.VMI.Spec.Domain.Devices.TPM)
		}
		expanded++
	}
	if expanded != len(corpusConflicts) {
		t.Errorf("%d instancetype manifests expanded, want %d", expanded, len(corpusConflicts))
	}
}
