package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestSound(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "ich9 default", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Sound = &v1.SoundDevice{Name: "audio"} },
			Contains: []string{`<sound model="ich9">`, `<alias name="ua-audio">`}},
		{Name: "ac97", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Sound = &v1.SoundDevice{Name: "a", Model: "ac97"}
		},
			Contains: []string{`<sound model="ac97">`}},
		{Name: "unknown", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Sound = &v1.SoundDevice{Name: "a", Model: "sb16"}
		},
			Err: "spec.domain.devices.sound.model"},
	})
}
