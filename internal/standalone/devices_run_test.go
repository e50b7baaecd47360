package standalone_test

import (
	"os"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// gpuVMI is the test guest with a GPU passed through.
var gpuVMI = testguest.Manifest{
	Meta:    testguest.Meta{Name: "gpuvm"},
	Boot:    testguest.Boot{Kernel: "KERNELDIR"},
	Sizing:  testguest.Sizing{Memory: "64Mi", GuestMemory: true},
	Disks:   testguest.Disks{Root: "ROOTDISK"},
	Network: testguest.Network{AutoattachPod: true},
	GPUs:    []testguest.GPU{{Name: "g", DeviceName: "nvidia.com/GP102GL_Tesla_P40"}},
}.YAML()

// TestVlctlRunDevice: a VMI with a GPU is refused without --device, naming
// the flag; with one, on this machine (no IOMMU, no vfio-pci), refused
// saying why VFIO cannot work here. Nothing is left either time.
func TestVlctlRunDevice(t *testing.T) {
	needRoot(t)
	file := guestManifest(t, "gpu", gpuVMI)
	root := workRoot(t)
	code, _, stderr := vlctl(t, time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
	if code != 1 {
		t.Errorf("without --device: exit %d, want 1", code)
	}
	oneLineError(t, stderr, `spec.domain.devices.gpus[0]: GPU "g" needs a host PCI device bound to vfio-pci: --device g=DDDD:BB:SS.F`)
	checkNothingLeft(t, root)

	want := "this host has no IOMMU (/sys/kernel/iommu_groups is empty)"
	if ents, _ := os.ReadDir("/sys/kernel/iommu_groups"); len(ents) > 0 {
		want = "no PCI device 0000:ff:1f.7 on this host"
	}
	code, _, stderr = vlctl(t, time.Minute, "run", "--emulation", "--device", "g=0000:ff:1f.7", "--workdir", root, "--record-dir", workRoot(t), file)
	if code != 1 {
		t.Errorf("with --device: exit %d, want 1", code)
	}
	oneLineError(t, stderr, "--device g=0000:ff:1f.7: ", want)
	checkNothingLeft(t, root)
}
