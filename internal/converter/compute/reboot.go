package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// RebootPolicy maps spec.domain.rebootPolicy to <on_reboot>.
type RebootPolicy struct{}

func (RebootPolicy) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	p := vmi.Spec.Domain.RebootPolicy
	if p == nil {
		return nil
	}
	switch *p {
	case v1.RebootPolicyReboot:
		dom.OnReboot = "restart"
	case v1.RebootPolicyTerminate:
		dom.OnReboot = "destroy"
	default:
		return fmt.Errorf("spec.domain.rebootPolicy: %q is not Reboot or Terminate", *p)
	}
	return nil
}
