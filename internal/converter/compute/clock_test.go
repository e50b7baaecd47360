package compute_test

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestClock(t *testing.T) {
	tz := v1.ClockOffsetTimezone("Europe/Paris")
	empty := v1.ClockOffsetTimezone("")
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<clock"}},
		{Name: "utc reset", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{}}}
		}, Contains: []string{`<clock offset="utc" adjustment="reset">`}},
		{Name: "utc offset", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{OffsetSeconds: convtest.Ptr(-3600)}}}
		}, Contains: []string{`<clock offset="utc" adjustment="-3600">`}},
		{Name: "timezone", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz}}
		}, Contains: []string{`<clock offset="timezone" timezone="Europe/Paris">`}},
		{Name: "empty timezone", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &empty}}
		}, Err: "spec.domain.clock.timezone: must not be empty"},
		{Name: "both", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: &tz, UTC: &v1.ClockOffsetUTC{}}}
		}, Err: "mutually exclusive"},
		{Name: "timers in order", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{}}, Timer: &v1.Timer{
				HPET:   &v1.HPETTimer{Enabled: convtest.Ptr(false)},
				PIT:    &v1.PITTimer{TickPolicy: v1.PITTickPolicyDelay},
				RTC:    &v1.RTCTimer{TickPolicy: v1.RTCTickPolicyCatchup, Track: v1.TrackGuest},
				Hyperv: &v1.HypervTimer{},
				KVM:    &v1.KVMTimer{Enabled: convtest.Ptr(true)},
			}}
		}, Contains: []string{`<timer name="rtc" track="guest" tickpolicy="catchup" present="yes">`, `<timer name="pit" tickpolicy="delay" present="yes">`,
			`<timer name="hpet" present="no">`},
			Check: func(t *testing.T, d *libvirtxml.Domain) {
				var names []string
				for _, tm := range d.Clock.Timer {
					names = append(names, tm.Name)
				}
				if got := strings.Join(names, ","); got != "rtc,pit,kvmclock,hpet,hypervclock" {
					t.Errorf("timers %s, want KubeVirt's order rtc,pit,kvmclock,hpet,hypervclock", got)
				}
			}},
	})
}
