package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestRebootPolicy(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "unset", Absent: []string{"on_reboot"}},
		{Name: "terminate", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.RebootPolicy = convtest.Ptr(v1.RebootPolicyTerminate)
		},
			Contains: []string{"<on_reboot>destroy</on_reboot>"}},
		{Name: "reboot", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.RebootPolicy = convtest.Ptr(v1.RebootPolicyReboot) },
			Contains: []string{"<on_reboot>restart</on_reboot>"}},
		{Name: "bad", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.RebootPolicy = convtest.Ptr(v1.RebootPolicy("Later"))
		},
			Err: "spec.domain.rebootPolicy"},
	})
}
