package compute

import (
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/facts"
)

// Controllers adds the USB, SCSI and virtio-serial controllers, then the spare
// pcie-root-ports KubeVirt reserves for hotplug. It runs after every
// configurator that adds PCI devices, because the port count depends on them.
type Controllers struct{ Ctx *facts.Context }

// InterfaceSlotCountAnnotation overrides the number of NIC slots reserved.
const InterfaceSlotCountAnnotation = "kubevirt.io/pci-interface-slot-count"

// maxRootPortIndex is the highest controller index KubeVirt gives a root port.
const maxRootPortIndex = 31

func (c Controllers) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	devs := devices(dom)
	a := arch(vmi, c.Ctx)
	usb := libvirtxml.DomainController{Type: "usb", Index: uintPtr(0), Model: "none"}
	if a == "arm64" || (a != "s390x" && needsUSB(devs)) {
		usb.Model = "qemu-xhci"
	}
	devs.Controllers = append(devs.Controllers, usb)

	if !vmi.Spec.Domain.Devices.DisableHotplug || hasSCSIDisk(devs) {
		model := virtioModel(vmi, c.Ctx)
		if a == "s390x" {
			model = "virtio-scsi"
		}
		devs.Controllers = append(devs.Controllers, libvirtxml.DomainController{
			Type: "scsi", Index: uintPtr(0), Model: model,
		})
	}
	if notFalse(vmi.Spec.Domain.Devices.AutoattachSerialConsole) {
		devs.Controllers = append(devs.Controllers, libvirtxml.DomainController{
			Type: "virtio-serial", Index: uintPtr(0), Model: virtioModel(vmi, c.Ctx),
		})
	}
	n := hotplugRootPorts(vmi, dom, a)
	next := uint(1)
	for i := 0; i < n && next <= maxRootPortIndex; i++ {
		devs.Controllers = append(devs.Controllers, libvirtxml.DomainController{
			Type: "pci", Index: uintPtr(next), Model: "pcie-root-port",
		})
		next++
	}
	return nil
}

func needsUSB(devs *libvirtxml.DomainDeviceList) bool {
	for _, in := range devs.Inputs {
		if in.Bus == "usb" || in.Bus == "" {
			return true
		}
	}
	for _, d := range devs.Disks {
		if d.Target != nil && d.Target.Bus == "usb" {
			return true
		}
	}
	for _, h := range devs.Hostdevs {
		if h.SubsysUSB != nil {
			return true
		}
	}
	return len(devs.RedirDevs) > 0
}

func hasSCSIDisk(devs *libvirtxml.DomainDeviceList) bool {
	for _, d := range devs.Disks {
		if d.Target != nil && d.Target.Bus == "scsi" {
			return true
		}
	}
	return false
}

// hotplugRootPorts is KubeVirt's count of free root ports (B.8): P slots kept
// for NICs plus E extra ports, so that the PCIe topology leaves room for
// hotplugged NICs and disks. KubeVirt gets the P ports by defining the domain
// with placeholder NICs; adding the ports directly gives the same count with
// one define.
func hotplugRootPorts(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain, a string) int {
	if a != "amd64" && a != "arm64" {
		return 0
	}
	machine := ""
	if dom.OS != nil && dom.OS.Type != nil {
		machine = dom.OS.Type.Machine
	}
	if !strings.HasPrefix(machine, "q35") && !strings.HasPrefix(machine, "pc-q35") && !strings.HasPrefix(machine, "virt") {
		return 0
	}
	nics := 0
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.State != v1.InterfaceStateAbsent {
			nics++
		}
	}
	p := 0
	if s, ok := vmi.Annotations[InterfaceSlotCountAnnotation]; ok {
		if v, err := strconv.Atoi(s); err == nil {
			p = max(0, v-nics)
		}
	} else if nics > 0 {
		p = max(0, 4-nics)
	}
	t, m := 8, 3
	if guestMemoryBytes(vmi) > 2<<30 {
		t, m = 16, 6
	}
	e := max(0, max(t-pciDevices(dom.Devices), m)-p)
	return p + e
}

// pciDevices counts the devices that take a PCIe slot, as KubeVirt counts them.
func pciDevices(devs *libvirtxml.DomainDeviceList) int {
	n := len(devs.Interfaces) + len(devs.Watchdogs) + len(devs.RNGs)
	for _, h := range devs.Hostdevs {
		if h.SubsysPCI != nil || h.SubsysMDev != nil {
			n++
		}
	}
	for _, c := range devs.Controllers {
		if c.Type == "pci" && (c.Model == "pci-root" || c.Model == "pcie-root" ||
			strings.Contains(c.Model, "expander")) {
			continue
		}
		n++
	}
	for _, d := range devs.Disks {
		if d.Target != nil && d.Target.Bus == "virtio" {
			n++
		}
	}
	for _, in := range devs.Inputs {
		if in.Bus == "virtio" {
			n++
		}
	}
	if devs.MemBalloon != nil && devs.MemBalloon.Model != "none" {
		n++
	}
	return n
}
