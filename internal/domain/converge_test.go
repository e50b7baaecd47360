package domain

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
)

func TestDecideConverge(t *testing.T) {
	paused := func(r libvirt.DomainPausedReason) int32 { return int32(r) }
	for _, tc := range []struct {
		name                 string
		st                   libvirt.DomainState
		reason               int32
		userPaused           bool
		vmiRunning, vmiFinal bool
		want                 convergeAction
	}{
		{name: "defined, never started", st: libvirt.DomainShutoff, want: convergeStart},
		{name: "crashed before the VMI ran", st: libvirt.DomainCrashed, want: convergeStart},
		{name: "off after running: the handler decides", st: libvirt.DomainShutoff, vmiRunning: true, want: convergeNothing},
		{name: "off and the VMI final", st: libvirt.DomainShutoff, vmiFinal: true, want: convergeNothing},
		{name: "running", st: libvirt.DomainRunning, vmiRunning: true, want: convergeNothing},
		{name: "shutting down", st: libvirt.DomainShutdown, want: convergeNothing},
		{name: "paused by the user through us", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedUnknown), userPaused: true, want: convergeNothing},
		{name: "paused by the user, libvirt says", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedUser), want: convergeNothing},
		{name: "paused for a migration", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedMigration), want: convergeNothing},
		{name: "paused while starting up", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedStartingUp), want: convergeNothing},
		{name: "paused for post-copy", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedPostcopy), want: convergeNothing},
		{name: "paused on an I/O error", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedIoerror), want: convergeResume},
		{name: "paused for no known reason", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedUnknown), want: convergeResume},
		{name: "paused by the watchdog", st: libvirt.DomainPaused, reason: paused(libvirt.DomainPausedWatchdog), vmiRunning: true, want: convergeResume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideConverge(tc.st, tc.reason, tc.userPaused, tc.vmiRunning, tc.vmiFinal); got != tc.want {
				t.Errorf("decideConverge = %d, want %d", got, tc.want)
			}
		})
	}
}
