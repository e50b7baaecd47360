package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestInput(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none on amd64", Absent: []string{"<input"}, Contains: []string{`<controller type="usb" index="0" model="none">`}},
		{Name: "usb tablet needs xhci", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "tablet", Type: v1.InputTypeTablet, Bus: v1.InputBusUSB}}
		}, Contains: []string{`<input type="tablet" bus="usb">`, `<alias name="ua-tablet">`, `<controller type="usb" index="0" model="qemu-xhci">`}},
		{Name: "virtio tablet", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "t", Type: v1.InputTypeTablet, Bus: v1.InputBusVirtio}}
		}, Contains: []string{`<input type="tablet" bus="virtio" model="virtio">`, `model="none"`}},
		{Name: "keyboard refused", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "k", Type: v1.InputTypeKeyboard}}
		}, Err: `spec.domain.devices.inputs[0].type: "keyboard" is not supported`},
		{Name: "bad bus", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "t", Type: v1.InputTypeTablet, Bus: "ps2"}}
		}, Err: "spec.domain.devices.inputs[0].bus"},
	})
}
