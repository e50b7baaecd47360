package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// Panic maps devices.panicDevices to <panic model>.
type Panic struct{}

func (Panic) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	for i, p := range vmi.Spec.Domain.Devices.PanicDevices {
		model := ""
		if p.Model != nil {
			model = string(*p.Model)
		}
		switch v1.PanicDeviceModel(model) {
		case v1.Isa, v1.Hyperv, v1.Pvpanic:
		case "":
			model = string(v1.Isa)
		default:
			return fmt.Errorf("spec.domain.devices.panicDevices[%d].model: %q is not one of isa, hyperv, pvpanic", i, model)
		}
		devices(dom).Panics = append(devices(dom).Panics, libvirtxml.DomainPanic{Model: model})
	}
	return nil
}
