package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// Sound adds devices.sound as an ich9 (default) or ac97 sound card.
type Sound struct{}

func (Sound) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	s := vmi.Spec.Domain.Devices.Sound
	if s == nil {
		return nil
	}
	model := s.Model
	switch model {
	case "":
		model = "ich9"
	case "ich9", "ac97":
	default:
		return fmt.Errorf("spec.domain.devices.sound.model: %q is not supported, use ich9 or ac97", model)
	}
	devices(dom).Sounds = append(devices(dom).Sounds, libvirtxml.DomainSound{
		Model: model, Alias: alias(s.Name),
	})
	return nil
}
