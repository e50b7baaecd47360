package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestPanic(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "models", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.PanicDevices = []v1.PanicDevice{{Model: convtest.Ptr(v1.Isa)}, {Model: convtest.Ptr(v1.Hyperv)}}
		}, Contains: []string{`<panic model="isa">`, `<panic model="hyperv">`}},
		{Name: "bad model", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.PanicDevices = []v1.PanicDevice{{Model: convtest.Ptr(v1.PanicDeviceModel("s390"))}}
		}, Err: "spec.domain.devices.panicDevices[0].model"},
	})
}
