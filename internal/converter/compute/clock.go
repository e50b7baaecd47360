package compute

import (
	"fmt"
	"strconv"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// Clock maps domain.clock. Without one, no <clock> is emitted and libvirt
// uses UTC, as KubeVirt does.
type Clock struct{}

func (Clock) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	c := vmi.Spec.Domain.Clock
	if c == nil {
		return nil
	}
	clock := &libvirtxml.DomainClock{}
	switch {
	case c.UTC != nil && c.Timezone != nil:
		return fmt.Errorf("spec.domain.clock: utc and timezone are mutually exclusive")
	case c.UTC != nil:
		clock.Offset = "utc"
		if c.UTC.OffsetSeconds != nil {
			clock.Adjustment = strconv.Itoa(*c.UTC.OffsetSeconds)
		} else {
			clock.Adjustment = "reset"
		}
	case c.Timezone != nil:
		if *c.Timezone == "" {
			return fmt.Errorf("spec.domain.clock.timezone: must not be empty")
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
	dom.Clock = clock
	return nil
}
