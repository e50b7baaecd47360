package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// RNG adds a virtio RNG fed from /dev/urandom, only when devices.rng is set.
type RNG struct{ Ctx *facts.Context }

func (r RNG) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if vmi.Spec.Domain.Devices.Rng == nil {
		return nil
	}
	devices(dom).RNGs = append(devices(dom).RNGs, libvirtxml.DomainRNG{
		Model: virtioModel(vmi, r.Ctx),
		Backend: &libvirtxml.DomainRNGBackend{
			Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"},
		},
	})
	return nil
}
