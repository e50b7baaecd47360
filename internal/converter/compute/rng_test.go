package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestRNG(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<rng"}},
		{Name: "urandom", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Rng = &v1.Rng{} },
			Contains: []string{`<rng model="virtio-non-transitional">`, `<backend model="random">/dev/urandom</backend>`}},
		{Name: "transitional", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Rng = &v1.Rng{}
			v.Spec.Domain.Devices.UseVirtioTransitional = convtest.Ptr(true)
		}, Contains: []string{`<rng model="virtio-transitional">`}},
	})
}
