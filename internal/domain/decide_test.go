package domain

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
)

// TestDecideSync is Sync's decision, from (VMI, live domain) alone.
func TestDecideSync(t *testing.T) {
	paused := func(r libvirt.DomainPausedReason) int32 { return int32(r) }
	vmi := func(phase v1.VirtualMachineInstancePhase) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: phase}}
	}
	defined := func(st libvirt.DomainState, reason int32) domainNow {
		return domainNow{exists: true, state: st, reason: reason}
	}
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		live domainNow
		want runAction
	}{
		{name: "no domain: define and start", vmi: vmi(v1.Scheduled), want: runDefine},
		{name: "no domain, the VMI already running (a new launcher)", vmi: vmi(v1.Running), want: runDefine},
		{name: "defined, never started", vmi: vmi(v1.Scheduled), live: defined(libvirt.DomainShutoff, 0), want: runStart},
		{name: "crashed before the VMI ran", vmi: vmi(v1.Scheduled), live: defined(libvirt.DomainCrashed, 0), want: runStart},
		{name: "off after running: the handler decides", vmi: vmi(v1.Running), live: defined(libvirt.DomainShutoff, 0), want: runNothing},
		{name: "off and the VMI final", vmi: vmi(v1.Succeeded), live: defined(libvirt.DomainShutoff, 0), want: runNothing},
		{name: "off and the VMI failed", vmi: vmi(v1.Failed), live: defined(libvirt.DomainShutoff, 0), want: runNothing},
		{name: "running: devices follow the VMI", vmi: vmi(v1.Running), live: defined(libvirt.DomainRunning, 0), want: runNothing},
		{name: "shutting down", vmi: vmi(v1.Running), live: defined(libvirt.DomainShutdown, 0), want: runNothing},
		{name: "paused by the user through us", vmi: vmi(v1.Running), live: domainNow{exists: true, state: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedUnknown), userPaused: true}, want: runNothing},
		{name: "paused by the user, libvirt says", vmi: vmi(v1.Running), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedUser)), want: runNothing},
		{name: "paused for a migration", vmi: vmi(v1.Running), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedMigration)), want: runNothing},
		{name: "paused while starting up", vmi: vmi(v1.Scheduled), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedStartingUp)), want: runNothing},
		{name: "paused for post-copy", vmi: vmi(v1.Running), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedPostcopy)), want: runNothing},
		{name: "paused on an I/O error", vmi: vmi(v1.Running), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedIoerror)), want: runResume},
		{name: "paused for no known reason", vmi: vmi(v1.Scheduled), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedUnknown)), want: runResume},
		{name: "paused by the watchdog", vmi: vmi(v1.Running), live: defined(libvirt.DomainPaused, paused(libvirt.DomainPausedWatchdog)), want: runResume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideSync(tc.vmi, tc.live); got != tc.want {
				t.Errorf("decideSync = %d, want %d", got, tc.want)
			}
		})
	}
}
