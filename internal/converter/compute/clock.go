package compute

import (
	"fmt"
	"strconv"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// Clock maps domain.clock, then the TSC frequency the scheduler picked
// (tscTimer). Without either, no <clock> is emitted and libvirt uses UTC, as
// KubeVirt does.
type Clock struct{}

func (Clock) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	clock, err := specClock(vmi.Spec.Domain.Clock)
	if err != nil {
		return err
	}
	if t := tscTimer(vmi); t != nil {
		if clock == nil {
			// KubeVirt writes no offset here; libvirt's schema wants one,
			// and utc is what libvirt takes without it.
			clock = &libvirtxml.DomainClock{Offset: "utc"}
		}
		clock.Timer = append(clock.Timer, *t)
	}
	dom.Clock = clock
	return nil
}

// tscTimer is the tsc timer at the frequency of status.topologyHints when
// the guest needs a fixed TSC frequency: an invtsc CPU feature that is
// required or forced (the guest would not boot elsewhere), or Hyper-V
// reenlightenment (its timers would drift after a migration). KubeVirt's
// scheduler fills the hint from the node's frequency; nothing else does.
func tscTimer(vmi *v1.VirtualMachineInstance) *libvirtxml.DomainTimer {
	h := vmi.Status.TopologyHints
	if h == nil || h.TSCFrequency == nil || *h.TSCFrequency <= 0 {
		return nil
	}
	if !needsInvTSC(vmi) && !reenlightenment(vmi) {
		return nil
	}
	return &libvirtxml.DomainTimer{Name: "tsc", Frequency: uint64(*h.TSCFrequency)}
}

func needsInvTSC(vmi *v1.VirtualMachineInstance) bool {
	if vmi.Spec.Domain.CPU == nil {
		return false
	}
	for _, f := range vmi.Spec.Domain.CPU.Features {
		if f.Name == "invtsc" && (f.Policy == "require" || f.Policy == "force") {
			return true
		}
	}
	return false
}

func reenlightenment(vmi *v1.VirtualMachineInstance) bool {
	f := vmi.Spec.Domain.Features
	return f != nil && f.Hyperv != nil && f.Hyperv.Reenlightenment != nil &&
		f.Hyperv.Reenlightenment.Enabled != nil && *f.Hyperv.Reenlightenment.Enabled
}

// specClock converts domain.clock; nil without one.
func specClock(c *v1.Clock) (*libvirtxml.DomainClock, error) {
	if c == nil {
		return nil, nil
	}
	clock := &libvirtxml.DomainClock{}
	switch {
	case c.UTC != nil && c.Timezone != nil:
		return nil, fmt.Errorf("spec.domain.clock: utc and timezone are mutually exclusive")
	case c.UTC != nil:
		clock.Offset = "utc"
		if c.UTC.OffsetSeconds != nil {
			clock.Adjustment = strconv.Itoa(*c.UTC.OffsetSeconds)
		} else {
			clock.Adjustment = "reset"
		}
	case c.Timezone != nil:
		if *c.Timezone == "" {
			return nil, fmt.Errorf("spec.domain.clock.timezone: must not be empty")
		}
		clock.Offset = "timezone"
		clock.TimeZone = string(*c.Timezone)
	}
	if t := c.Timer; t != nil {
		if t.RTC != nil {
			clock.Timer = append(clock.Timer, libvirtxml.DomainTimer{
				Name: "rtc", Track: string(t.RTC.Track), TickPolicy: string(t.RTC.TickPolicy),
				Present: yesNo(notFalse(t.RTC.Enabled)),
			})
		}
		if t.PIT != nil {
			clock.Timer = append(clock.Timer, libvirtxml.DomainTimer{
				Name: "pit", TickPolicy: string(t.PIT.TickPolicy), Present: yesNo(notFalse(t.PIT.Enabled)),
			})
		}
		if t.KVM != nil {
			clock.Timer = append(clock.Timer, libvirtxml.DomainTimer{
				Name: "kvmclock", Present: yesNo(notFalse(t.KVM.Enabled)),
			})
		}
		if t.HPET != nil {
			clock.Timer = append(clock.Timer, libvirtxml.DomainTimer{
				Name: "hpet", TickPolicy: string(t.HPET.TickPolicy), Present: yesNo(notFalse(t.HPET.Enabled)),
			})
		}
		if t.Hyperv != nil {
			clock.Timer = append(clock.Timer, libvirtxml.DomainTimer{
				Name: "hypervclock", Present: yesNo(notFalse(t.Hyperv.Enabled)),
			})
		}
	}
	return clock, nil
}
