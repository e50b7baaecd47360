// Package runctl is the protocol of a running `vlctl run`'s control socket:
// the requests vlctl's verbs (addvolume, removevolume, addinterface,
// removeinterface, memory-dump) and a migrating `vlctl run --migrate-from`
// send the run, one type each, and the run's answer. The client side
// (Ask, AskMigration) and the server side (Listen, Serve, WriteReply) both
// live here, so the two ends cannot disagree.
//
// On the wire a request is one JSON object on a line, every operation's
// fields in one object named by "op", and the answer one JSON object on a
// line (with the listening sockets of published ports as SCM_RIGHTS after
// a completed migration): what vlctl has always written, so a vlctl of
// either age reaches a run of the other.
package runctl

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// The operations' names on the wire.
const (
	OpAddVolume       = "addvolume"
	OpRemoveVolume    = "removevolume"
	OpAddInterface    = "addinterface"
	OpRemoveInterface = "removeinterface"
	OpMemoryDump      = "memory-dump"
	OpMigrate         = "migrate"
)

// Timeout bounds a request the server does not give longer (Ask's default
// and the server's first deadline): the Sync of a detach waits up to 15 s
// for the guest, an attach a few.
const Timeout = 90 * time.Second

// Request is one request to a running `vlctl run`: AddVolume,
// RemoveVolume, AddInterface, RemoveInterface, MemoryDump or Migrate.
type Request interface {
	// Op is the request's name on the wire.
	Op() string
	wire() wire
}

// AddVolume plugs the user's file or block device File into the VM as the
// hotplugged volume (and disk) Volume.
type AddVolume struct {
	Volume string
	File   string
	// Bus is the disk's bus, scsi ("", the default) or virtio.
	Bus string
	// Serial is the disk's serial ("": none).
	Serial string
}

// RemoveVolume unplugs the volume Volume that an AddVolume plugged.
type RemoveVolume struct{ Volume string }

// AddInterface plugs a bridge interface Interface on a new secondary
// network into the VM, with the MAC address MAC ("": the pod
// interface's).
type AddInterface struct{ Interface, MAC string }

// RemoveInterface unplugs the interface Interface that an AddInterface
// plugged.
type RemoveInterface struct{ Interface string }

// MemoryDump dumps the guest's memory into File, a new file.
type MemoryDump struct{ File string }

// Migrate asks the run to migrate its guest to the run whose work dir is
// Target (the requester, a vlctl run --migrate-from): Migration is the
// migration's uid and Bandwidth its cap, a quantity of bytes per second
// ("": none).
type Migrate struct{ Target, Migration, Bandwidth string }

func (AddVolume) Op() string       { return OpAddVolume }
func (RemoveVolume) Op() string    { return OpRemoveVolume }
func (AddInterface) Op() string    { return OpAddInterface }
func (RemoveInterface) Op() string { return OpRemoveInterface }
func (MemoryDump) Op() string      { return OpMemoryDump }
func (Migrate) Op() string         { return OpMigrate }

// wire is a request as it travels: one object for every operation, the
// fields an operation does not use left out.
type wire struct {
	Op        string `json:"op"`
	Volume    string `json:"volume,omitempty"`
	Interface string `json:"interface,omitempty"`
	MAC       string `json:"mac,omitempty"`
	File      string `json:"file,omitempty"`
	Bus       string `json:"bus,omitempty"`
	Serial    string `json:"serial,omitempty"`
	Target    string `json:"target,omitempty"`
	Migration string `json:"migration,omitempty"`
	Bandwidth string `json:"bandwidth,omitempty"`
}

func (q AddVolume) wire() wire {
	return wire{Op: OpAddVolume, Volume: q.Volume, File: q.File, Bus: q.Bus, Serial: q.Serial}
}
func (q RemoveVolume) wire() wire { return wire{Op: OpRemoveVolume, Volume: q.Volume} }
func (q AddInterface) wire() wire {
	return wire{Op: OpAddInterface, Interface: q.Interface, MAC: q.MAC}
}
func (q RemoveInterface) wire() wire { return wire{Op: OpRemoveInterface, Interface: q.Interface} }
func (q MemoryDump) wire() wire      { return wire{Op: OpMemoryDump, File: q.File} }
func (q Migrate) wire() wire {
	return wire{Op: OpMigrate, Target: q.Target, Migration: q.Migration, Bandwidth: q.Bandwidth}
}

// request is the request w names; an error for an operation this side
// does not know. Fields the operation does not use are ignored, as they
// always were.
func (w wire) request() (Request, error) {
	switch w.Op {
	case OpAddVolume:
		return AddVolume{Volume: w.Volume, File: w.File, Bus: w.Bus, Serial: w.Serial}, nil
	case OpRemoveVolume:
		return RemoveVolume{Volume: w.Volume}, nil
	case OpAddInterface:
		return AddInterface{Interface: w.Interface, MAC: w.MAC}, nil
	case OpRemoveInterface:
		return RemoveInterface{Interface: w.Interface}, nil
	case OpMemoryDump:
		return MemoryDump{File: w.File}, nil
	case OpMigrate:
		return Migrate{Target: w.Target, Migration: w.Migration, Bandwidth: w.Bandwidth}, nil
	}
	return nil, fmt.Errorf("unknown request %q", w.Op)
}

// decode reads one request from r.
func decode(r io.Reader) (Request, error) {
	var w wire
	if err := json.NewDecoder(r).Decode(&w); err != nil {
		return nil, fmt.Errorf("bad request: %w", err)
	}
	return w.request()
}

// Reply is the run's answer: what it did, or why it did not.
type Reply struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
	// Ports name the published ports (guestnet.Publish.Recorded) whose
	// listening sockets come with the answer, in the order of its
	// descriptors (SCM_RIGHTS): a completed migrate's, for the run the
	// guest went to.
	Ports []string `json:"ports,omitempty"`
}
