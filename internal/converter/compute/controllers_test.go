package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func rootPorts(d *libvirtxml.Domain) int {
	n := 0
	for _, c := range d.Devices.Controllers {
		if c.Model == "pcie-root-port" {
			n++
		}
	}
	return n
}

func wantRootPorts(n int) func(t *testing.T, d *libvirtxml.Domain) {
	return func(t *testing.T, d *libvirtxml.Domain) {
		t.Helper()
		if got := rootPorts(d); got != n {
			t.Errorf("%d pcie-root-ports, want %d", got, n)
		}
	}
}

func nics(n int) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) {
		for i := range n {
			name := string(rune('a' + i))
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: name,
				InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
			v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: name,
				NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: name}}})
		}
	}
}

func TestControllers(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		// Ports = one per PCIe device (disk, scsi, virtio-serial, balloon: 4)
		// plus the spare ones. pciDevices = disk + usb(none) + scsi +
		// virtio-serial + balloon = 5; no NICs so P = 0; E = max(8-5, 3) = 3.
		{Name: "no nics", Check: wantRootPorts(4 + 3), Contains: []string{
			`<controller type="usb" index="0" model="none">`, `<controller type="scsi" index="0" model="virtio-non-transitional">`,
			`<controller type="virtio-serial" index="0" model="virtio-non-transitional">`}},
		// one NIC: P = 3, pci = 6, E = max(max(2,3)-3, 0) = 0.
		{Name: "one nic", VMI: nics(1), Check: wantRootPorts(5 + 3)},
		// 5 NICs: P = 0, pci = 10, E = max(-2, 3) = 3.
		{Name: "five nics", VMI: nics(5), Check: wantRootPorts(9 + 3)},
		// >2GiB: T/M = 16/6; no NICs: E = max(16-5, 6) = 11.
		{Name: "big memory", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = q("4Gi") }, Check: wantRootPorts(4 + 11)},
		// Annotation: P = 6-1 = 5; pci = 6; E = max(max(2,3)-5, 0) = 0.
		{Name: "slot annotation", VMI: func(v *v1.VirtualMachineInstance) {
			nics(1)(v)
			v.Annotations = map[string]string{"kubevirt.io/pci-interface-slot-count": "6"}
		}, Check: wantRootPorts(5 + 5)},
		// Conventional PCI devices share one pcie-to-pci-bridge port: e1000
		// and i6300esb add 1 device port, the NIC makes P = 3, pci = 7 with
		// the watchdog, E = 0.
		{Name: "conventional pci devices", VMI: func(v *v1.VirtualMachineInstance) {
			nics(1)(v)
			v.Spec.Domain.Devices.Interfaces[0].Model = "e1000"
			v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "w", WatchdogDevice: v1.WatchdogDevice{I6300ESB: &v1.I6300ESBWatchdog{}}}
		}, Check: wantRootPorts(5 + 3)},
		// A PCI host device counts in pciDevices (6: E = max(8-6, 3) = 3)
		// and takes a port; a mediated one takes a port (libvirt puts its
		// vfio-pci device on one) but KubeVirt does not count it: E stays 3.
		{Name: "pci and mediated host devices", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.GPUs = []v1.GPU{{Name: "p", DeviceName: "x.io/p"}, {Name: "m", DeviceName: "x.io/m"}}
		}, Ctx: func(c *facts.Context) {
			c.Devices.Env = map[string]string{"PCI_RESOURCE_X_IO_P": "0000:81:00.0", "MDEV_PCI_RESOURCE_X_IO_M": "5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11"}
		}, Check: wantRootPorts(6 + 3)},
		// Two mediated devices: pciDevices stays 5, E = 3, two more ports.
		{Name: "mediated host devices do not lower the spare ports", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.GPUs = []v1.GPU{{Name: "m", DeviceName: "x.io/m"}, {Name: "n", DeviceName: "x.io/m"}}
			v.Spec.Domain.Memory.Guest = q("4Gi")
		}, Ctx: func(c *facts.Context) {
			c.Devices.Env = map[string]string{"MDEV_PCI_RESOURCE_X_IO_M": "5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11,0b4c3a1e-6f2d-4e8a-b1c9-7d3e5f6a8b20"}
		}, Check: wantRootPorts(6 + 11)},
		{Name: "at most 31", VMI: func(v *v1.VirtualMachineInstance) {
			nics(26)(v)
			v.Spec.Domain.Memory.Guest = q("4Gi")
		}, Check: wantRootPorts(31)},
		{Name: "not on i440fx", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Machine.Type = "pc" }, Check: wantRootPorts(0)},
		{Name: "hotplug disabled drops scsi", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.DisableHotplug = true },
			Absent: []string{`type="scsi"`}},
		{Name: "hotplug disabled keeps scsi for a scsi disk", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.DisableHotplug = true
			v.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSCSI
		}, Contains: []string{`type="scsi"`}},
		{Name: "usb disk needs xhci", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusUSB },
			Contains: []string{`model="qemu-xhci"`}},
		{Name: "s390x scsi model and no usb", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Architecture = "s390x"
			v.Spec.Domain.Machine.Type = "s390-ccw-virtio"
		}, Contains: []string{`model="virtio-scsi"`, `<controller type="usb" index="0" model="none">`}, Check: wantRootPorts(0)},
	})
}
