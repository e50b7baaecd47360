package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// onRootComplex tells whether the VMI asks for its PCI devices on the root
// bus (kubevirt.io/placePCIDevicesOnRootComplex "true"), on the
// architectures where KubeVirt does that placement.
func onRootComplex(vmi *v1.VirtualMachineInstance, arch string) bool {
	return vmi.Annotations[v1.PlacePCIDevicesOnRootComplex] == "true" && (arch == "amd64" || arch == "arm64")
}

// rootSlots hands out the slots of bus 0 in KubeVirt's order: from 2 up
// (0 is the host bridge, 1 the VGA card), skipping 0x1b (the first ich9
// sound card) and 0x1f (QEMU's SATA controller). Unlike KubeVirt it also
// skips the slots the spec gave devices, which libvirt would otherwise
// refuse as taken twice.
type rootSlots struct {
	next  uint
	taken map[uint]bool
}

func (r *rootSlots) assign(addr *libvirtxml.DomainAddress) (*libvirtxml.DomainAddress, error) {
	if addr != nil {
		return addr, nil // the spec placed it
	}
	for r.next < 2 || r.next == 0x1b || r.next == 0x1f || r.taken[r.next] {
		r.next++
	}
	if r.next >= 0x20 {
		return nil, fmt.Errorf("metadata.annotations[%s]: no slot left on the root PCI bus", v1.PlacePCIDevicesOnRootComplex)
	}
	zero, slot := uint(0), r.next
	r.next++
	return &libvirtxml.DomainAddress{PCI: &libvirtxml.DomainAddressPCI{Domain: &zero, Bus: &zero, Slot: &slot, Function: &zero}}, nil
}

// placeOnRootComplex gives every PCI device without an address a slot on
// bus 0, in the order KubeVirt walks them: interfaces, PCI host devices,
// controllers (not the PCI roots), virtio disks, virtio inputs, watchdogs, RNGs, the balloon.
func placeOnRootComplex(devs *libvirtxml.DomainDeviceList) error {
	r := &rootSlots{taken: rootSlotsTaken(devs)}
	var err error
	place := func(a **libvirtxml.DomainAddress) {
		if err == nil {
			*a, err = r.assign(*a)
		}
	}
	for i := range devs.Interfaces {
		place(&devs.Interfaces[i].Address)
	}
	for i := range devs.Hostdevs {
		if devs.Hostdevs[i].SubsysPCI != nil {
			place(&devs.Hostdevs[i].Address)
		}
	}
	for i, c := range devs.Controllers {
		switch {
		case c.Type == "pci" && (c.Model == "pci-root" || c.Model == "pcie-root" || c.Model == "pcie-expander-bus"):
		case c.Type == "usb" && c.Model == "none":
			// KubeVirt gives it a slot too, which libvirt drops (there is
			// no device): the slot stays empty, and the devices after it
			// get the slots they get in KubeVirt.
			var unused *libvirtxml.DomainAddress
			place(&unused)
		default:
			place(&devs.Controllers[i].Address)
		}
	}
	for i, d := range devs.Disks {
		if d.Target != nil && d.Target.Bus == "virtio" {
			place(&devs.Disks[i].Address)
		}
	}
	for i, in := range devs.Inputs {
		if in.Bus == "virtio" {
			place(&devs.Inputs[i].Address)
		}
	}
	for i := range devs.Watchdogs {
		place(&devs.Watchdogs[i].Address)
	}
	for i := range devs.RNGs {
		place(&devs.RNGs[i].Address)
	}
	if b := devs.MemBalloon; b != nil && b.Model != "none" {
		place(&b.Address)
	}
	return err
}

// rootSlotsTaken are the bus 0 slots the spec gave devices.
func rootSlotsTaken(devs *libvirtxml.DomainDeviceList) map[uint]bool {
	taken := map[uint]bool{}
	mark := func(a *libvirtxml.DomainAddress) {
		if a != nil && a.PCI != nil && a.PCI.Bus != nil && *a.PCI.Bus == 0 && a.PCI.Slot != nil {
			taken[*a.PCI.Slot] = true
		}
	}
	for _, i := range devs.Interfaces {
		mark(i.Address)
	}
	for _, d := range devs.Disks {
		mark(d.Address)
	}
	for _, h := range devs.Hostdevs {
		mark(h.Address)
	}
	return taken
}
