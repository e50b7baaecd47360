package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestWatchdog(t *testing.T) {
	wd := func(a v1.WatchdogAction) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "wd", WatchdogDevice: v1.WatchdogDevice{I6300ESB: &v1.I6300ESBWatchdog{Action: a}}}
		}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "reset default", VMI: wd(""), Contains: []string{`<watchdog model="i6300esb" action="reset">`, `<alias name="ua-wd">`}},
		{Name: "poweroff", VMI: wd(v1.WatchdogActionPoweroff), Contains: []string{`action="poweroff"`}},
		{Name: "bad action", VMI: wd("explode"), Err: "spec.domain.devices.watchdog.action"},
		{Name: "no model", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "wd"} },
			Err: "spec.domain.devices.watchdog: no watchdog model supported on amd64"},
	})
}
