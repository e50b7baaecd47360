package domainjson

import "github.com/digitalocean/go-libvirt"

// LifeCycle values (Status.Status) in KubeVirt's vocabulary.
const (
	StatusNoState      = "NoState"
	StatusRunning      = "Running"
	StatusBlocked      = "Blocked"
	StatusPaused       = "Paused"
	StatusShuttingDown = "ShuttingDown"
	StatusShutoff      = "Shutoff"
	StatusCrashed      = "Crashed"
	StatusPMSuspended  = "PMSuspended"
)

// ReasonNonExistent is the reason of the synthetic "domain gone" object.
const ReasonNonExistent = "NonExistent"

// reasons lists, per libvirt state, the KubeVirt reason for each libvirt
// reason code (the index). Codes past the end are unmapped and give "".
var reasons = map[libvirt.DomainState][]string{
	libvirt.DomainNostate: {"Unknown"},
	// KubeVirt reports every running reason as Unknown.
	libvirt.DomainRunning: {"Unknown", "Unknown", "Unknown", "Unknown", "Unknown", "Unknown",
		"Unknown", "Unknown", "Unknown", "Unknown", "Unknown", "Unknown"},
	libvirt.DomainBlocked: {"Unknown"},
	libvirt.DomainPaused: {"Unknown", "User", "Migration", "Save", "Dump", "IOError", "Watchdog",
		"FromSnapshot", "ShuttingDown", "Snapshot", "Crashed", "StartingUp", "Postcopy", "PostcopyFailed"},
	libvirt.DomainShutdown: {"Unknown", "User"},
	libvirt.DomainShutoff: {"Unknown", "Shutdown", "Destroyed", "Crashed", "Migrated", "Saved",
		"Failed", "FromSnapshot"},
	libvirt.DomainCrashed:     {"Unknown", "Panicked"},
	libvirt.DomainPmsuspended: {"Unknown"},
}

var statuses = map[libvirt.DomainState]string{
	libvirt.DomainNostate:     StatusNoState,
	libvirt.DomainRunning:     StatusRunning,
	libvirt.DomainBlocked:     StatusBlocked,
	libvirt.DomainPaused:      StatusPaused,
	libvirt.DomainShutdown:    StatusShuttingDown,
	libvirt.DomainShutoff:     StatusShutoff,
	libvirt.DomainCrashed:     StatusCrashed,
	libvirt.DomainPmsuspended: StatusPMSuspended,
}

// StateAndReason maps libvirt's state and reason code to KubeVirt's
// LifeCycle and StateChangeReason (kubevirt-wire.md 3.4). A reason libvirt
// added after KubeVirt's table (e.g. paused API error, shutoff daemon) is
// "". An unknown state is NoState: never "" (virt-handler would treat the
// domain as dead) and never "Unknown" (reserved for the handler itself).
func StateAndReason(state libvirt.DomainState, reason int32) (status, reasonText string) {
	status, ok := statuses[state]
	if !ok {
		return StatusNoState, ""
	}
	rs := reasons[state]
	if reason < 0 || int(reason) >= len(rs) {
		return status, ""
	}
	return status, rs[reason]
}
