package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestTPM(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<tpm"}},
		{Name: "tis", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.TPM = &v1.TPMDevice{} },
			Contains: []string{`<tpm model="tpm-tis">`, `<backend type="emulator" version="2.0">`}},
		{Name: "persistent crb", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{Persistent: convtest.Ptr(true)}
		},
			Contains: []string{`<tpm model="tpm-crb">`, `persistent_state="yes"`}},
		{Name: "disabled", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.TPM = &v1.TPMDevice{Enabled: convtest.Ptr(false)}
		},
			Absent: []string{"<tpm"}},
	})
}
