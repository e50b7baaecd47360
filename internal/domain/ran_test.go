package domain

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
)

func TestRan(t *testing.T) {
	for _, tt := range []struct {
		name   string
		st     libvirt.DomainState
		reason int32
		want   bool
	}{
		{"running has run", libvirt.DomainRunning, int32(libvirt.DomainRunningBooted), true},
		{"paused by the user has run", libvirt.DomainPaused, int32(libvirt.DomainPausedUser), true},
		{"paused for an incoming migration has run", libvirt.DomainPaused, int32(libvirt.DomainPausedMigration), true},
		{"paused while starting up has not run yet", libvirt.DomainPaused, int32(libvirt.DomainPausedStartingUp), false},
		{"shutting down has run", libvirt.DomainShutdown, 0, true},
		{"shut off has not run", libvirt.DomainShutoff, int32(libvirt.DomainShutoffDaemon), false},
		{"crashed has not run", libvirt.DomainCrashed, 0, false},
	} {
		if got := ran(tt.st, tt.reason); got != tt.want {
			t.Errorf("%s: ran = %v", tt.name, got)
		}
	}
}
