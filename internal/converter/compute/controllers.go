package compute

import (
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
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
	if a == "amd64" && strings.EqualFold(vmi.Annotations[v1.DisablePCIHole64], "true") {
		devs.Controllers = append(devs.Controllers, libvirtxml.DomainController{
			Type: "pci", Index: uintPtr(0), Model: "pcie-root",
			PCI: &libvirtxml.DomainControllerPCI{Hole64: &libvirtxml.DomainControllerPCIHole64{Unit: "KiB"}},
		})
	}
	if notFalse(vmi.Spec.Domain.Devices.AutoattachSerialConsole) {
		devs.Controllers = append(devs.Controllers, libvirtxml.DomainController{
			Type: "virtio-serial", Index: uintPtr(0), Model: virtioModel(vmi, c.Ctx),
		})
	}
	if onRootComplex(vmi, a) {
		// KubeVirt places them after its whole conversion; no PCI device
		// is added after this step.
		if err := placeOnRootComplex(devs); err != nil {
			return err
		}
	}
	if spare := SpareRootPorts(vmi, c.Ctx, dom); spare > 0 {
		// libvirt puts every PCIe device without an address on the first
		// free root port, so ports for the devices come first and the
		// spare ones after them stay empty.
		n := min(spare+rootPortDevices(devs), maxRootPortIndex)
		for i := 1; i <= n; i++ {
			devs.Controllers = append(devs.Controllers, libvirtxml.DomainController{
				Type: "pci", Index: uintPtr(uint(i)), Model: "pcie-root-port",
			})
		}
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

// SpareRootPorts is KubeVirt's count of root ports left free for hotplug
// (B.8): P slots kept for NICs plus E extra ports. KubeVirt gets them by
// defining the domain with placeholder NICs and redefining; here they are
// written directly, after one port per device that needs one. It is 0 off
// q35/virt machines and on s390x. The domain's own pcie-root-ports are not
// counted, so it gives the same answer before and after Controllers runs.
func SpareRootPorts(vmi *v1.VirtualMachineInstance, c *facts.Context, dom *libvirtxml.Domain) int {
	a := facts.Arch(vmi, c)
	if a != "amd64" && a != "arm64" || onRootComplex(vmi, a) {
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
	e := max(0, max(t-pciDevices(devices(dom)), m)-p)
	return p + e
}

// pciDevices counts the devices that take a PCIe slot, as KubeVirt counts them.
func pciDevices(devs *libvirtxml.DomainDeviceList) int {
	n := len(devs.Interfaces) + len(devs.Watchdogs) + len(devs.RNGs)
	for _, h := range devs.Hostdevs {
		// KubeVirt counts PCI host devices only (CountPCIDevices), though
		// a mediated one takes a root port of libvirt's too
		// (rootPortDevices counts it for that).
		if h.SubsysPCI != nil {
			n++
		}
	}
	for _, c := range devs.Controllers {
		if c.Type == "pci" && (c.Model == "pci-root" || c.Model == "pcie-root" || c.Model == "pcie-root-port" ||
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

// conventionalPCI are device models QEMU has only as conventional PCI: on q35
// libvirt puts them behind one pcie-to-pci-bridge, which takes a root port.
var conventionalPCI = map[string]bool{
	"e1000": true, "rtl8139": true, "ne2k_pci": true, "pcnet": true,
	"i6300esb": true, "ac97": true, "virtio-transitional": true,
}

// rootPortDevices counts the devices libvirt will place on a pcie-root-port
// of a q35 machine: PCIe endpoints without an address of their own, plus one
// for the pcie-to-pci-bridge when there are conventional PCI devices. It
// matches libvirt 9.0 (checked by defining every golden domain in the real
// daemon); if it counted low, libvirt would take spare ports for devices.
func rootPortDevices(devs *libvirtxml.DomainDeviceList) int {
	n, legacy := 0, false
	add := func(model string, addr *libvirtxml.DomainAddress) {
		if addr != nil && addr.PCI != nil {
			return
		}
		if conventionalPCI[model] {
			legacy = true
			return
		}
		n++
	}
	for _, i := range devs.Interfaces {
		model := ""
		if i.Model != nil {
			model = i.Model.Type
		}
		add(model, i.Address)
	}
	for _, d := range devs.Disks {
		if d.Target != nil && d.Target.Bus == "virtio" {
			add(d.Model, d.Address)
		}
	}
	for _, c := range devs.Controllers {
		switch {
		case c.Type == "pci" || c.Type == "sata" || c.Type == "ide" || (c.Type == "usb" && c.Model == "none"):
		default:
			add(c.Model, c.Address)
		}
	}
	for _, h := range devs.Hostdevs {
		if h.SubsysPCI != nil || h.SubsysMDev != nil {
			add("", h.Address)
		}
	}
	for _, in := range devs.Inputs {
		if in.Bus == "virtio" {
			add(in.Model, in.Address)
		}
	}
	for _, r := range devs.RNGs {
		add(r.Model, r.Address)
	}
	for _, f := range devs.Filesystems {
		add(f.Model, f.Address) // vhost-user-fs-pci, a PCIe endpoint
	}
	if b := devs.MemBalloon; b != nil && b.Model != "none" {
		add(b.Model, b.Address)
	}
	for _, w := range devs.Watchdogs {
		add(w.Model, w.Address)
	}
	if v := devs.VSock; v != nil {
		add(v.Model, v.Address)
	}
	for _, s := range devs.Sounds {
		if s.Model != "ich9" { // ich9 is an integrated device on the root complex
			add(s.Model, s.Address)
		}
	}
	for _, v := range devs.Videos {
		if v.Model.Type == "virtio" {
			add("", v.Address) // vga/bochs sit on the root complex
		}
	}
	if legacy {
		n++
	}
	return n
}
