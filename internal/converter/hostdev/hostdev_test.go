package hostdev_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func addrs(m map[string]string) func(*facts.Context) {
	return func(c *facts.Context) { c.PCIAddresses = m }
}

func TestHostDevices(t *testing.T) {
	gpu := func(v *v1.VirtualMachineInstance) {
		v.Spec.Domain.Devices.GPUs = []v1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GP102GL_Tesla_P40"}}
	}
	sriov := func(v *v1.VirtualMachineInstance) {
		v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "sriov-net", BootOrder: convtest.Ptr(uint(3)), InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
		v.Spec.Networks = []v1.Network{{Name: "sriov-net", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "sriov/sriov-network"}}}}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "gpu", VMI: gpu, Ctx: addrs(map[string]string{"gpu1": "0000:81:00.1"}), Contains: []string{
			`<hostdev mode="subsystem" type="pci" managed="no">`, `<address domain="0x0000" bus="0x81" slot="0x00" function="0x1">`, `<alias name="ua-gpu-gpu1">`}},
		{Name: "gpu without address", VMI: gpu,
			Err: `spec.domain.devices.gpus[0]: no PCI address known for GPU "gpu1"`},
		{Name: "gpu with a bad address", VMI: gpu, Ctx: addrs(map[string]string{"gpu1": "81:00"}), Err: `PCI address of GPU "gpu1"`},
		{Name: "host device", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.HostDevices = []v1.HostDevice{{Name: "nvme", DeviceName: "vendor.com/nvme"}}
		}, Ctx: addrs(map[string]string{"nvme": "02:00.0"}), Contains: []string{`<alias name="ua-hostdevice-nvme">`, `bus="0x02"`}},
		{Name: "sriov with boot order", VMI: sriov, Ctx: addrs(map[string]string{"sriov-net": "0000:3b:02.4"}),
			Contains: []string{`<alias name="ua-sriov-sriov-net">`, `<boot order="3">`, `function="0x4"`}, Absent: []string{"<interface"}},
		{Name: "sriov without address", VMI: sriov, Err: `spec.domain.devices.interfaces[0]: no PCI address known for SR-IOV interface "sriov-net"`},
		{Name: "one address twice", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.GPUs = []v1.GPU{{Name: "a"}, {Name: "b"}}
		}, Ctx: addrs(map[string]string{"a": "0000:81:00.0", "b": "0000:81:00.0"}), Err: `is already given to "a"`},
	})
}
