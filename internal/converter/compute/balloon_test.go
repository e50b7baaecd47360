package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestBalloon(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "default", Contains: []string{`<memballoon model="virtio-non-transitional" freePageReporting="on">`, `<stats period="10">`}},
		{Name: "off", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.AutoattachMemBalloon = convtest.Ptr(false) },
			Contains: []string{`<memballoon model="none">`}, Absent: []string{"<stats"}},
		{Name: "no stats, no reporting", Ctx: func(c *facts.Context) { c.MemBalloonStatsPeriod = 0; c.FreePageReportingDisabled = true },
			Contains: []string{`freePageReporting="off"`}, Absent: []string{"<stats"}},
		{Name: "annotation disables reporting", VMI: func(v *v1.VirtualMachineInstance) {
			v.Annotations = map[string]string{"kubevirt.io/free-page-reporting-disabled": "true"}
		}, Contains: []string{`freePageReporting="off"`}},
		{Name: "dedicated cpus disable reporting", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.DedicatedCPUPlacement = true },
			Ctx: func(c *facts.Context) { c.CPUSet = []uint{2} }, Contains: []string{`freePageReporting="off"`}},
	})
}
