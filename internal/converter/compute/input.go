package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Input maps devices.inputs (only tablets, on usb or virtio) and adds the
// architecture's implicit inputs when a graphics device is attached.
type Input struct{ Ctx *facts.Context }

func (in Input) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	devs := devices(dom)
	hasTablet := false
	for i, spec := range vmi.Spec.Domain.Devices.Inputs {
		field := fmt.Sprintf("spec.domain.devices.inputs[%d]", i)
		if spec.Type != v1.InputTypeTablet && spec.Type != "" {
			return fmt.Errorf("%s.type: %q is not supported, only tablet", field, spec.Type)
		}
		input := libvirtxml.DomainInput{Type: "tablet", Alias: alias(spec.Name)}
		switch spec.Bus {
		case v1.InputBusUSB, "":
			input.Bus = "usb"
		case v1.InputBusVirtio:
			input.Bus = "virtio"
			input.Model = "virtio"
		default:
			return fmt.Errorf("%s.bus: %q is not supported, use usb or virtio", field, spec.Bus)
		}
		hasTablet = true
		devs.Inputs = append(devs.Inputs, input)
	}
	if !notFalse(vmi.Spec.Domain.Devices.AutoattachGraphicsDevice) {
		return nil
	}
	switch arch(vmi, in.Ctx) {
	case "arm64":
		// No PS/2 on arm64: give the VNC console a pointer and a keyboard.
		if !hasTablet {
			devs.Inputs = append(devs.Inputs, libvirtxml.DomainInput{Type: "tablet", Bus: "usb"})
		}
		devs.Inputs = append(devs.Inputs, libvirtxml.DomainInput{Type: "keyboard", Bus: "usb"})
	case "s390x":
		devs.Inputs = append(devs.Inputs, libvirtxml.DomainInput{Type: "keyboard", Bus: "virtio"})
	}
	return nil
}

// alias is KubeVirt's user alias "ua-<name>"; nil for unnamed devices.
func alias(name string) *libvirtxml.DomainAlias {
	if name == "" {
		return nil
	}
	return &libvirtxml.DomainAlias{Name: "ua-" + name}
}
