// Package hostdev converts devices passed through from the host (GPUs, host
// devices and SR-IOV interfaces) into PCI <hostdev> elements. The converter
// cannot discover devices: their PCI addresses come from the Context, filled
// by the launcher from the device plugins' environment.
package hostdev

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

type configurator struct{ ctx *facts.Context }

// New returns the host device configurator.
func New(c *facts.Context) facts.Configurator { return configurator{ctx: c} }

func (h configurator) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	used := map[string]string{} // address -> device, to catch one device given twice
	add := func(field, name, what, aliasPrefix string, boot *uint) error {
		if name == "" {
			return fmt.Errorf("%s.name: must not be empty", field)
		}
		addr, ok := h.ctx.PCIAddresses[name]
		if !ok || addr == "" {
			return fmt.Errorf("%s: no PCI address known for %s %q (the launcher gets it from the device plugin; vlctl convert takes it as --pci-address %s=DDDD:BB:SS.F)", field, what, name, name)
		}
		pci, err := facts.PCIAddress(addr)
		if err != nil {
			return fmt.Errorf("%s: PCI address of %s %q: %w", field, what, name, err)
		}
		if other, dup := used[addr]; dup {
			return fmt.Errorf("%s: PCI address %s of %q is already given to %q", field, addr, name, other)
		}
		used[addr] = name
		hd := libvirtxml.DomainHostdev{
			Managed: "no",
			SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
				Source: &libvirtxml.DomainHostdevSubsysPCISource{Address: pci},
			},
			Alias: &libvirtxml.DomainAlias{Name: aliasPrefix + name},
		}
		if boot != nil {
			hd.Boot = &libvirtxml.DomainDeviceBoot{Order: *boot}
		}
		dom.Devices.Hostdevs = append(dom.Devices.Hostdevs, hd)
		return nil
	}
	d := vmi.Spec.Domain.Devices
	for i, g := range d.GPUs {
		if err := add(fmt.Sprintf("spec.domain.devices.gpus[%d]", i), g.Name, "GPU", "ua-gpu-", nil); err != nil {
			return err
		}
	}
	for i, hd := range d.HostDevices {
		if err := add(fmt.Sprintf("spec.domain.devices.hostDevices[%d]", i), hd.Name, "host device", "ua-hostdevice-", nil); err != nil {
			return err
		}
	}
	for i, iface := range d.Interfaces {
		if iface.SRIOV == nil || iface.State == v1.InterfaceStateAbsent {
			continue
		}
		if err := add(fmt.Sprintf("spec.domain.devices.interfaces[%d]", i), iface.Name, "SR-IOV interface", "ua-sriov-", iface.BootOrder); err != nil {
			return err
		}
	}
	return nil
}
