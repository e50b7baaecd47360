package hostdev_test

import (
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func env(kv ...string) func(*facts.Context) {
	return func(c *facts.Context) {
		c.Devices.Env = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Devices.Env[kv[i]] = kv[i+1]
		}
	}
}

func gpus(gs ...v1.GPU) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.GPUs = gs }
}

func hostDevs(hs ...v1.HostDevice) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.HostDevices = hs }
}

const (
	tesla    = "nvidia.com/GP102GL_Tesla_P40"
	teslaPCI = "PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40"
	grid     = "nvidia.com/GRID_T4-1Q"
	gridMDev = "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"
	uuidA    = "5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11"
	uuidB    = "0b4c3a1e-6f2d-4e8a-b1c9-7d3e5f6a8b20"
)

// aliases lists the hostdev aliases in domain order.
func aliases(want ...string) func(*testing.T, *libvirtxml.Domain) {
	return func(t *testing.T, dom *libvirtxml.Domain) {
		var got []string
		for _, h := range dom.Devices.Hostdevs {
			got = append(got, h.Alias.Name)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("hostdev aliases %v, want %v", got, want)
		}
	}
}

func TestEnvVar(t *testing.T) {
	for in, want := range map[string]string{
		tesla:                   teslaPCI,
		"intel.com/qat.vf":      "PCI_RESOURCE_INTEL_COM_QAT_VF",
		"kubevirt.io/storage":   "PCI_RESOURCE_KUBEVIRT_IO_STORAGE",
		"nvidia.com/GRID_T4-1Q": "PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q",
	} {
		if got := hostdev.EnvVar(hostdev.PCIPrefix, in); got != want {
			t.Errorf("EnvVar(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDevicePlugins(t *testing.T) {
	on, off := convtest.Ptr(true), convtest.Ptr(false)
	convtest.Run(t, []convtest.Case{
		{Name: "gpu", VMI: gpus(v1.GPU{Name: "gpu1", DeviceName: tesla}), Ctx: env(teslaPCI, "0000:81:00.1"), Contains: []string{
			`<hostdev mode="subsystem" type="pci" managed="no">`, `<address domain="0x0000" bus="0x81" slot="0x00" function="0x1">`, `<alias name="ua-gpu-gpu1">`},
			Absent: []string{"display="}},
		{Name: "two gpus of one resource take its addresses in order, a trailing comma ignored",
			VMI: gpus(v1.GPU{Name: "a", DeviceName: tesla}, v1.GPU{Name: "b", DeviceName: tesla}),
			Ctx: env(teslaPCI, "0000:81:00.0,0000:82:00.0,"),
			Check: func(t *testing.T, dom *libvirtxml.Domain) {
				aliases("ua-gpu-a", "ua-gpu-b")(t, dom)
				if b := *dom.Devices.Hostdevs[1].SubsysPCI.Source.Address.Bus; b != 0x82 {
					t.Errorf("second GPU on bus %#x, want 0x82", b)
				}
			}},
		{Name: "a pci gpu asked for a display is refused (libvirt 9.0 has none for pci)",
			VMI: gpus(v1.GPU{Name: "a", DeviceName: tesla, VirtualGPUOptions: &v1.VGPUOptions{Display: &v1.VGPUDisplayOptions{Enabled: on}}}),
			Ctx: env(teslaPCI, "0000:81:00.0"),
			Err: `spec.domain.devices.gpus[0].virtualGPUOptions.display.enabled: GPU "a" is a PCI device (PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40), and libvirt 9.0 shows a display of mediated devices only`},
		{Name: "a pci gpu with display options but not enabled: no display",
			VMI: gpus(v1.GPU{Name: "c", DeviceName: tesla, VirtualGPUOptions: &v1.VGPUOptions{Display: &v1.VGPUDisplayOptions{RamFB: &v1.FeatureState{Enabled: on}}}}),
			Ctx: env(teslaPCI, "0000:81:00.0"), Absent: []string{"display=", "ramfb="}},
		{Name: "vgpu: the first mediated device gets display and ramfb by default",
			VMI: gpus(v1.GPU{Name: "v1", DeviceName: grid}, v1.GPU{Name: "v2", DeviceName: grid}),
			Ctx: env(gridMDev, uuidA+","+uuidB),
			Contains: []string{`<hostdev mode="subsystem" type="mdev" model="vfio-pci" display="on" ramfb="on">`, `<address uuid="` + uuidA + `">`,
				`<hostdev mode="subsystem" type="mdev" model="vfio-pci">`, `<address uuid="` + uuidB + `">`, `<alias name="ua-gpu-v2">`},
			Absent: []string{"managed="}},
		{Name: "vgpu display options: off, on without ramfb, default on",
			VMI: gpus(v1.GPU{Name: "v1", DeviceName: grid, VirtualGPUOptions: &v1.VGPUOptions{Display: &v1.VGPUDisplayOptions{Enabled: off}}},
				v1.GPU{Name: "v2", DeviceName: grid, VirtualGPUOptions: &v1.VGPUOptions{Display: &v1.VGPUDisplayOptions{RamFB: &v1.FeatureState{Enabled: off}}}},
				v1.GPU{Name: "v3", DeviceName: grid}),
			Ctx: env(gridMDev, uuidA+","+uuidB+",11111111-2222-3333-4444-555555555555"),
			Check: func(t *testing.T, dom *libvirtxml.Domain) {
				h := dom.Devices.Hostdevs
				got := []string{h[0].SubsysMDev.Display + "/" + h[0].SubsysMDev.RamFB, h[1].SubsysMDev.Display + "/" + h[1].SubsysMDev.RamFB, h[2].SubsysMDev.Display + "/" + h[2].SubsysMDev.RamFB}
				if strings.Join(got, " ") != "/ on/ /" {
					t.Errorf("display/ramfb %v, want / on/ /", got)
				}
			}},
		{Name: "pci devices come before mediated ones, host devices before gpus",
			VMI: func(v *v1.VirtualMachineInstance) {
				gpus(v1.GPU{Name: "v", DeviceName: grid}, v1.GPU{Name: "p", DeviceName: tesla})(v)
				hostDevs(v1.HostDevice{Name: "nvme", DeviceName: "vendor.com/nvme"})(v)
			},
			Ctx:   env(teslaPCI, "0000:81:00.0", gridMDev, uuidA, "PCI_RESOURCE_VENDOR_COM_NVME", "0000:c1:00.0"),
			Check: aliases("ua-hostdevice-nvme", "ua-gpu-p", "ua-gpu-v")},
		{Name: "host device mediated: no display", VMI: hostDevs(v1.HostDevice{Name: "m", DeviceName: grid}), Ctx: env(gridMDev, uuidA),
			Contains: []string{`<hostdev mode="subsystem" type="mdev" model="vfio-pci">`, `<alias name="ua-hostdevice-m">`}},
		{Name: "usb host device by bus and device, with a USB controller",
			VMI:      hostDevs(v1.HostDevice{Name: "stick", DeviceName: "kubevirt.io/storage"}),
			Ctx:      env("USB_RESOURCE_KUBEVIRT_IO_STORAGE", "3:7"),
			Contains: []string{`<hostdev mode="subsystem" type="usb">`, `<address bus="3" device="7">`, `<alias name="ua-usb-host-stick">`, `<controller type="usb" index="0" model="qemu-xhci">`}},
		{Name: "usb address not bus:device", VMI: hostDevs(v1.HostDevice{Name: "stick", DeviceName: "kubevirt.io/storage"}),
			Ctx: env("USB_RESOURCE_KUBEVIRT_IO_STORAGE", "3-7"),
			Err: `spec.domain.devices.hostDevices[0]: host device "stick": USB_RESOURCE_KUBEVIRT_IO_STORAGE: "3-7" is not a USB bus:device`},
		{Name: "no variable for the resource", VMI: gpus(v1.GPU{Name: "gpu1", DeviceName: tesla}),
			Err: `spec.domain.devices.gpus[0]: no device for GPU "gpu1" of resource "nvidia.com/GP102GL_Tesla_P40": PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40 is unset, MDEV_PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40 is unset`},
		{Name: "fewer addresses than devices", VMI: gpus(v1.GPU{Name: "a", DeviceName: tesla}, v1.GPU{Name: "b", DeviceName: tesla}),
			Ctx: env(teslaPCI, "0000:81:00.0"),
			Err: `spec.domain.devices.gpus[1]: no device for GPU "b" of resource "nvidia.com/GP102GL_Tesla_P40": PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40="0000:81:00.0" was used up by 1 device(s) before it`},
		{Name: "empty variable", VMI: hostDevs(v1.HostDevice{Name: "x", DeviceName: "vendor.com/x"}), Ctx: env("PCI_RESOURCE_VENDOR_COM_X", ","),
			Err: `PCI_RESOURCE_VENDOR_COM_X is empty`},
		{Name: "short address refused", VMI: gpus(v1.GPU{Name: "gpu1", DeviceName: tesla}), Ctx: env(teslaPCI, "81:00.0"),
			Err: `spec.domain.devices.gpus[0]: GPU "gpu1": PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40: "81:00.0" is not a PCI address`},
		{Name: "a gpu and a host device of one resource draw from pools of their own",
			VMI: func(v *v1.VirtualMachineInstance) {
				gpus(v1.GPU{Name: "a", DeviceName: tesla})(v)
				hostDevs(v1.HostDevice{Name: "b", DeviceName: tesla})(v)
			},
			Ctx: env(teslaPCI, "0000:81:00.0,0000:82:00.0"),
			Err: `host device PCI 0000:81:00.0 is given to both hostdevice-b and gpu-a`},
	})
}

func TestSRIOV(t *testing.T) {
	sriov := func(status bool, pci string) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "sriov-net", BootOrder: convtest.Ptr(uint(3)), PciAddress: pci,
				InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
			v.Spec.Networks = []v1.Network{{Name: "sriov-net", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "sriov/sriov-network"}}}}
			if status {
				v.Status.Interfaces = []v1.VirtualMachineInstanceNetworkInterface{{Name: "sriov-net", InfoSource: "domain, multus-status"}}
			}
		}
	}
	netPCI := func(m map[string]string) func(*facts.Context) {
		return func(c *facts.Context) { c.Devices.NetworkPCI = m }
	}
	convtest.Run(t, []convtest.Case{
		{Name: "with boot order and guest address", VMI: sriov(true, "0000:00:0a.0"), Ctx: netPCI(map[string]string{"sriov-net": "0000:3b:02.4"}),
			Contains: []string{`<alias name="ua-sriov-sriov-net">`, `<boot order="3">`, `<address domain="0x0000" bus="0x3b" slot="0x02" function="0x4">`,
				`<address type="pci" domain="0x0000" bus="0x00" slot="0x0a" function="0x0">`},
			Absent: []string{"<interface"}},
		{Name: "not yet reported by multus: waits for a hotplug", VMI: sriov(false, ""), Absent: []string{"<hostdev"}},
		{Name: "no network-info", VMI: sriov(true, ""), Ctx: func(c *facts.Context) { c.Devices.NetworkInfoErr = "open /etc/podinfo/network-info: no such file" },
			Err: `spec.domain.devices.interfaces[0]: no PCI address for SR-IOV interface "sriov-net": the network-info file: open /etc/podinfo/network-info: no such file`},
		{Name: "network-info without this network", VMI: sriov(true, ""), Ctx: netPCI(map[string]string{"other": "0000:3b:02.4"}),
			Err: `the network-info file has none for network "sriov-net"`},
		{Name: "bad guest address", VMI: sriov(true, "00:0a.0"), Ctx: netPCI(map[string]string{"sriov-net": "0000:3b:02.4"}),
			Err: `spec.domain.devices.interfaces[0].pciAddress: "00:0a.0" is not a PCI address`},
	})
}

func TestDRA(t *testing.T) {
	claim := func(c, r string) *v1.ClaimRequest { return &v1.ClaimRequest{ClaimName: c, RequestName: r} }
	dra := func(m map[facts.DRARequest]facts.DRADevice) func(*facts.Context) {
		return func(c *facts.Context) { c.Devices.DRA = m }
	}
	vgpu := facts.DRARequest{Claim: "vgpu", Request: "r"}
	pgpu := facts.DRARequest{Claim: "pgpu", Request: "r"}
	convtest.Run(t, []convtest.Case{
		{Name: "gpus: mediated before pci when both are named, first vgpu gets a display",
			VMI:      gpus(v1.GPU{Name: "p", ClaimRequest: claim("pgpu", "r")}, v1.GPU{Name: "v", ClaimRequest: claim("vgpu", "r")}),
			Ctx:      dra(map[facts.DRARequest]facts.DRADevice{pgpu: {PCIBusID: "0000:81:00.0"}, vgpu: {PCIBusID: "0000:82:00.0", MDevUUID: uuidA}}),
			Contains: []string{`<alias name="ua-dra-gpu-p">`, `<hostdev mode="subsystem" type="mdev" model="vfio-pci" display="on" ramfb="on">`, `<alias name="ua-dra-gpu-v">`},
			Absent:   []string{`bus="0x82"`}},
		{Name: "host devices: no display", VMI: hostDevs(v1.HostDevice{Name: "h", ClaimRequest: claim("vgpu", "r")}),
			Ctx:      dra(map[facts.DRARequest]facts.DRADevice{vgpu: {MDevUUID: uuidA}}),
			Contains: []string{`<hostdev mode="subsystem" type="mdev" model="vfio-pci">`, `<alias name="ua-dra-hostdevice-h">`}},
		{Name: "device plugin devices come first", VMI: gpus(v1.GPU{Name: "d", ClaimRequest: claim("pgpu", "r")}, v1.GPU{Name: "p", DeviceName: tesla}),
			Ctx: func(c *facts.Context) {
				env(teslaPCI, "0000:83:00.0")(c)
				dra(map[facts.DRARequest]facts.DRADevice{pgpu: {PCIBusID: "0000:81:00.0"}})(c)
			},
			Check: aliases("ua-gpu-p", "ua-dra-gpu-d")},
		{Name: "sriov on a resource claim network",
			VMI: func(v *v1.VirtualMachineInstance) {
				v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "vf", BootOrder: convtest.Ptr(uint(1)), InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
				v.Spec.Networks = []v1.Network{{Name: "vf", NetworkSource: v1.NetworkSource{ResourceClaim: claim("vfc", "vf")}}}
			},
			Ctx:      dra(map[facts.DRARequest]facts.DRADevice{{Claim: "vfc", Request: "vf"}: {PCIBusID: "0000:3b:02.5"}}),
			Contains: []string{`<alias name="ua-sriov-vf">`, `<boot order="1">`, `function="0x5"`}, Absent: []string{"<interface"}},
		{Name: "sriov on a resource claim network: a mediated device is no virtual function",
			VMI: func(v *v1.VirtualMachineInstance) {
				v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "vf", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
				v.Spec.Networks = []v1.Network{{Name: "vf", NetworkSource: v1.NetworkSource{ResourceClaim: claim("vfc", "vf")}}}
			},
			Ctx: dra(map[facts.DRARequest]facts.DRADevice{{Claim: "vfc", Request: "vf"}: {MDevUUID: uuidA}}),
			Err: `spec.domain.devices.interfaces[0]: SR-IOV interface "vf": DRA metadata of claim "vfc" request "vf" has no resource.kubernetes.io/pciBusID`},
		{Name: "metadata not read", VMI: gpus(v1.GPU{Name: "d", ClaimRequest: claim("pgpu", "r")}),
			Err: `spec.domain.devices.gpus[0]: GPU "d": no DRA metadata read for claim "pgpu" request "r"`},
		{Name: "metadata unreadable", VMI: gpus(v1.GPU{Name: "d", ClaimRequest: claim("pgpu", "r")}),
			Ctx: dra(map[facts.DRARequest]facts.DRADevice{pgpu: {Err: "no files matching x"}}),
			Err: `GPU "d": DRA metadata of claim "pgpu" request "r": no files matching x`},
		{Name: "incomplete claim request", VMI: hostDevs(v1.HostDevice{Name: "h", ClaimRequest: claim("pgpu", "")}),
			Err: `spec.domain.devices.hostDevices[0]: host device "h" has an incomplete claim request`},
	})
}
