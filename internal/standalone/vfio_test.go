package standalone

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// pciTree makes a host's sysfs and /dev/vfio below a directory: IOMMU
// groups (or none), and PCI devices with their driver and group.
type pciTree struct {
	t    *testing.T
	root string
}

func newPCITree(t *testing.T, iommu bool) pciTree {
	p := pciTree{t: t, root: t.TempDir()}
	p.mkdir("sys/kernel/iommu_groups")
	p.mkdir("sys/bus/pci/devices")
	p.mkdir("dev/vfio")
	if iommu {
		p.mkdir("sys/kernel/iommu_groups/12/devices")
	}
	return p
}

func (p pciTree) mkdir(rel string) {
	if err := os.MkdirAll(filepath.Join(p.root, rel), 0o755); err != nil {
		p.t.Fatal(err)
	}
}

// device adds a PCI device bound to driver ("" none) in group.
func (p pciTree) device(addr, driver, group string) {
	dir := "sys/bus/pci/devices/" + addr
	p.mkdir(dir)
	if driver != "" {
		if err := os.Symlink("../../../bus/pci/drivers/"+driver, filepath.Join(p.root, dir, "driver")); err != nil {
			p.t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../kernel/iommu_groups/"+group, filepath.Join(p.root, dir, "iommu_group")); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.root, "dev/vfio", group), nil, 0o600); err != nil {
		p.t.Fatal(err)
	}
}

func TestRunDevices(t *testing.T) {
	gpus := func(gs ...v1.GPU) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Devices.GPUs = gs
		return v
	}
	tesla := v1.GPU{Name: "g", DeviceName: "nvidia.com/GP102GL_Tesla_P40"}
	tesla2 := v1.GPU{Name: "h", DeviceName: "nvidia.com/GP102GL_Tesla_P40"}
	good := newPCITree(t, true)
	good.device("0000:81:00.0", "vfio-pci", "12")
	good.device("0000:82:00.0", "vfio-pci", "13")
	good.device("0000:83:00.0", "nvidia", "14")
	good.device("0000:84:00.0", "", "15")
	noIOMMU := newPCITree(t, false)
	noIOMMU.device("0000:81:00.0", "vfio-pci", "12")
	tests := []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		devs []Device
		sys  vfioSys
		want string // the env and groups, or the error
	}{
		{"no devices", gpus(), nil, vfioSys{Root: good.root}, ""},
		{"a gpu bound to vfio-pci", gpus(tesla), []Device{{"g", "0000:81:00.0"}}, vfioSys{Root: good.root},
			"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40=0000:81:00.0 /dev/vfio/12"},
		{"two gpus of one resource in flag order", gpus(tesla, tesla2), []Device{{"h", "0000:82:00.0"}, {"g", "0000:81:00.0"}}, vfioSys{Root: good.root},
			"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40=0000:82:00.0,0000:81:00.0 /dev/vfio/13 /dev/vfio/12"},
		{"gpu without --device", gpus(tesla), nil, vfioSys{Root: good.root},
			`error: spec.domain.devices.gpus[0]: GPU "g" needs a host PCI device bound to vfio-pci: --device g=DDDD:BB:SS.F (vlctl run has no device plugin)`},
		{"dra gpu", gpus(v1.GPU{Name: "d", ClaimRequest: &v1.ClaimRequest{ClaimName: "c", RequestName: "r"}}), nil, vfioSys{Root: good.root},
			`error: spec.domain.devices.gpus[0]: GPU "d" is allocated by DRA: vlctl run has no DRA driver`},
		{"unknown name", gpus(tesla), []Device{{"g", "0000:81:00.0"}, {"x", "0000:82:00.0"}}, vfioSys{Root: good.root},
			`error: --device x=0000:82:00.0: the VMI has no GPU or host device named "x"`},
		{"one address twice", gpus(tesla, tesla2), []Device{{"g", "0000:81:00.0"}, {"h", "0000:81:00.0"}}, vfioSys{Root: good.root},
			`error: --device h=0000:81:00.0: 0000:81:00.0 is given to "g" too`},
		{"short address", gpus(tesla), []Device{{"g", "81:00.0"}}, vfioSys{Root: good.root},
			`error: --device g=81:00.0: "81:00.0" is not a PCI address`},
		{"no IOMMU", gpus(tesla), []Device{{"g", "0000:81:00.0"}}, vfioSys{Root: noIOMMU.root},
			`error: --device g=0000:81:00.0: this host has no IOMMU (/sys/kernel/iommu_groups is empty)`},
		{"no such device", gpus(tesla), []Device{{"g", "0000:99:00.0"}}, vfioSys{Root: good.root},
			`error: --device g=0000:99:00.0: no PCI device 0000:99:00.0 on this host`},
		{"bound to another driver", gpus(tesla), []Device{{"g", "0000:83:00.0"}}, vfioSys{Root: good.root},
			`error: --device g=0000:83:00.0: PCI device 0000:83:00.0 is bound to nvidia, not vfio-pci`},
		{"bound to no driver", gpus(tesla), []Device{{"g", "0000:84:00.0"}}, vfioSys{Root: good.root},
			`error: --device g=0000:84:00.0: PCI device 0000:84:00.0 is bound to no driver, not vfio-pci`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, groups, err := runDevices(tt.vmi, tt.devs, tt.sys)
			got := strings.Join(append(env, groups...), " ")
			if err != nil {
				got = "error: " + err.Error()
			}
			if !strings.HasPrefix(got, tt.want) || (tt.want == "") != (got == "") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRunDevicesThisHost asks this machine: without an IOMMU (none here)
// --device is refused saying so; with one, a device that is not there is.
func TestRunDevicesThisHost(t *testing.T) {
	v := &v1.VirtualMachineInstance{}
	v.Spec.Domain.Devices.HostDevices = []v1.HostDevice{{Name: "nic", DeviceName: "intel.com/x710"}}
	want := "this host has no IOMMU (/sys/kernel/iommu_groups is empty)"
	if ents, _ := os.ReadDir("/sys/kernel/iommu_groups"); len(ents) > 0 {
		want = "no PCI device 0000:ff:1f.7 on this host"
	}
	_, _, err := runDevices(v, []Device{{"nic", "0000:ff:1f.7"}}, vfioSys{Root: "/"})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("runDevices on this host: %v, want %q", err, want)
	}
}

// TestVFIOGrant: the VM's uid gets read and write access to an IOMMU
// group's node by an ACL entry, set through an O_PATH descriptor (the node
// is never opened, which would claim the group), and loses it on undo.
func TestVFIOGrant(t *testing.T) {
	testenv.Root(t, "makes a device node")
	node := filepath.Join(t.TempDir(), "12")
	// A node of /dev/null's numbers stands in for a VFIO group's.
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	const uid = 4242
	g, err := vfioGrant(node, uid)
	if err != nil || g == nil {
		t.Fatalf("vfioGrant: %v, %v", g, err)
	}
	has := func() bool {
		f, err := os.Open(node)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		perm, ok, err := userstorage.UserPerm(f, uid)
		if err != nil {
			t.Fatal(err)
		}
		return ok && perm == 6
	}
	if !has() {
		t.Fatal("no rw entry for the uid after the grant")
	}
	if ok, err := g.Undo(); err != nil || !ok {
		t.Fatalf("undo: %v, %v", ok, err)
	}
	g.File().Close()
	if has() {
		t.Error("the uid's entry is still there after undo")
	}
	if _, err := vfioGrant(filepath.Dir(node), uid); err == nil {
		t.Error("a directory was granted as a VFIO group's node")
	}
}
