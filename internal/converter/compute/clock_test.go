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

// TestClockTSCFrequency: KubeVirt writes the TSC frequency the scheduler
// chose (status.topologyHints.tscFrequency) as a tsc timer only when the
// guest needs a fixed one: an invtsc CPU feature that is required or forced,
// or Hyper-V reenlightenment enabled.
func TestClockTSCFrequency(t *testing.T) {
	hint := func(v *v1.VirtualMachineInstance) {
		v.Status.TopologyHints = &v1.TopologyHints{TSCFrequency: convtest.Ptr(int64(2419200000))}
	}
	invtsc := func(policy string) func(v *v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			hint(v)
			v.Spec.Domain.CPU.Features = []v1.CPUFeature{{Name: "invtsc", Policy: policy}}
		}
	}
	tsc := `<timer name="tsc" frequency="2419200000"></timer>`
	convtest.Run(t, []convtest.Case{
		{Name: "hint alone", VMI: hint, Absent: []string{"<clock", `name="tsc"`}},
		{Name: "invtsc require", VMI: invtsc("require"), Contains: []string{`<clock offset="utc">`, tsc}},
		{Name: "invtsc force", VMI: invtsc("force"), Contains: []string{tsc}},
		{Name: "invtsc optional", VMI: invtsc("optional"), Absent: []string{`name="tsc"`}},
		{Name: "invtsc without a hint", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Features = []v1.CPUFeature{{Name: "invtsc", Policy: "require"}}
		}, Absent: []string{`name="tsc"`}},
		{Name: "zero hint", VMI: func(v *v1.VirtualMachineInstance) {
			invtsc("require")(v)
			v.Status.TopologyHints.TSCFrequency = convtest.Ptr(int64(0))
		}, Absent: []string{`name="tsc"`}},
		{Name: "reenlightenment after the spec timers", VMI: func(v *v1.VirtualMachineInstance) {
			hint(v)
			v.Spec.Domain.Features.Hyperv = &v1.FeatureHyperv{Reenlightenment: &v1.FeatureState{Enabled: convtest.Ptr(true)}}
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{}}, Timer: &v1.Timer{HPET: &v1.HPETTimer{}}}
		}, Contains: []string{`<clock offset="utc" adjustment="reset">`, `<timer name="hpet" present="yes"></timer>` + "\n    " + tsc}},
		{Name: "reenlightenment disabled", VMI: func(v *v1.VirtualMachineInstance) {
			hint(v)
			v.Spec.Domain.Features.Hyperv = &v1.FeatureHyperv{Reenlightenment: &v1.FeatureState{Enabled: convtest.Ptr(false)}}
		}, Absent: []string{`name="tsc"`}},
	})
}
