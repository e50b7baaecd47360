package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestHypervisor(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "kvm", Contains: []string{`<domain type="kvm">`}},
		{Name: "emulation", Emulation: true, Contains: []string{`<domain type="qemu">`}},
		{Name: "launch security refused", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.LaunchSecurity = &v1.LaunchSecurity{SEV: &v1.SEV{}} },
			Err: "spec.domain.launchSecurity: not supported"},
	})
}
