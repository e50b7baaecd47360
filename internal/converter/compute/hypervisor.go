package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Hypervisor sets the domain type: kvm, or qemu (TCG) under emulation. It
// also refuses what this launcher does not implement.
type Hypervisor struct{ Ctx *facts.Context }

func (h Hypervisor) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if vmi.Spec.Domain.LaunchSecurity != nil {
		return fmt.Errorf("spec.domain.launchSecurity: not supported (SEV, SNP and TDX need confidential-computing firmware and hosts)")
	}
	dom.Type = "kvm"
	if h.Ctx.Emulation {
		dom.Type = "qemu"
	}
	return nil
}
