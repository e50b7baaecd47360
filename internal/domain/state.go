package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// StateFileName is the launcher's state file in the pod's private
// directory.
const StateFileName = "launcher-state.json"

// State is what a launcher knows of its pod and domain that neither
// libvirt nor virt-handler keeps for it: the metadata of the Domain
// object (the grace period, the deletion and graceful-shutdown marks, the
// credentials' and the migration's outcome), the daemon's host UUID and
// when a frozen guest is thawed unasked. The manager keeps it in a file
// in the pod's private directory, so that a launcher started after its
// predecessor died takes the running guest over with it. KubeVirt keeps
// the metadata in the domain XML instead; here the XML stays as the
// converter made it.
type State struct {
	HostUUID string              `json:"hostUUID,omitempty"`
	Metadata domainjson.Metadata `json:"metadata"`
	// ThawAt is when the guest's file systems, frozen with a timeout,
	// are thawed if no Unfreeze came (nil: none pending).
	ThawAt *time.Time `json:"thawAt,omitempty"`
	// TargetOf is the migration this pod was prepared to receive: a
	// launcher taking over stays a target, and defines no domain of its
	// own on a Sync.
	TargetOf string `json:"targetOf,omitempty"`
}

// LoadState reads the state file at path. ok is false when there is none
// (a pod's first launcher).
func LoadState(path string) (s State, ok bool, err error) {
	b, err := safefs.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("launcher state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, false, fmt.Errorf("launcher state %s: %w", path, err)
	}
	return s, true, nil
}

// restoreState takes over what the previous launcher of this VMI (uid)
// knew. A migration it had under way is over: the daemon that ran it was
// stopped with it, and libvirt cancels an outgoing migration it finds
// unfinished when it starts again, the guest running on here. It is
// recorded as failed, so that virt-handler sees it end and a Migrate for
// the same migration is not run twice; so is a memory dump under way. A
// state of another VMI is not taken over.
func restoreState(s State, uid string, now time.Time) (domainjson.Metadata, *time.Time, error) {
	md := s.Metadata
	if uid != "" && md.UID != "" && md.UID != uid {
		return domainjson.Metadata{}, nil, fmt.Errorf("launcher state of VMI uid %s, not of %s: ignored", md.UID, uid)
	}
	if mig := md.Migration; mig != nil && mig.EndTimestamp == nil {
		const reason = "the launcher running the migration ended; the guest runs on in the source pod"
		next, err := migration.Result(mig, true, reason, "", now)
		if errors.Is(err, migration.ErrAbortInProgress) {
			next, err = migration.Result(mig, true, reason, v1.MigrationAbortFailed, now)
		}
		if err != nil {
			return domainjson.Metadata{}, nil, fmt.Errorf("end the migration under way: %w", err)
		}
		if next.EndTimestamp == nil {
			t := metav1.NewTime(now)
			next.EndTimestamp = &t
		}
		md.Migration = next
	}
	if d := md.MemoryDump; d != nil {
		// It ended with the daemon that made it; the file it left may
		// be cut short.
		md.MemoryDump = endDump(d, d.FileName, errors.New("the launcher running it ended"), now)
	}
	if b := md.Backup; b != nil {
		// libvirt cancels a backup job it finds when its daemon starts
		// again; the record says so, not "aborted" on request.
		md.Backup = endBackup(b, jobEnd{typ: libvirt.DomainJobFailed, errmsg: "the launcher running the backup ended"}, now)
	}
	return md, s.ThawAt, nil
}

// stateFile keeps the manager's State in its file: the one a previous
// launcher of the pod left, taken over into the record (takeOverState),
// and this launcher's, written from the record when it changed
// (saveState).
type stateFile struct {
	// path is the file ("" for none); uid the VMI's from the command
	// line, hostUUID the daemon's.
	path, uid, hostUUID string
	log                 *slog.Logger
	// rec holds what is kept: the metadata and the migration this pod
	// is the target of.
	rec *record
	// thaw is the guest's automatic thaw, kept and resumed (nil until
	// the guest agent operations exist: they save the state).
	thaw thawer

	// restoredThaw is the automatic thaw a previous launcher of the pod
	// had pending, taken over once connected (nil: none).
	restoredThaw *time.Time
	// saveMu orders the writes of the state file; savedState is what
	// was last written (saveState).
	saveMu     sync.Mutex
	savedState []byte
	// stateDropped: the launcher ends for good (drop); the state file
	// is not written again.
	stateDropped bool
}

// thawer is the guest agent's automatic thaw (agent.Guest).
type thawer interface {
	// ThawAt is when the frozen guest is thawed unasked (zero: never).
	ThawAt() time.Time
	ResumeThaw(v *v1.VirtualMachineInstance, at time.Time)
}

// takeOverState reads the state a previous launcher of this pod left, if
// any, into the record.
func (x *stateFile) takeOverState() {
	if x.path == "" {
		return
	}
	s, ok, err := LoadState(x.path)
	if err == nil && ok {
		var md domainjson.Metadata
		md, x.restoredThaw, err = restoreState(s, x.uid, time.Now())
		if err == nil {
			x.rec.mu.Lock()
			x.rec.md, x.rec.targetOf = md, s.TargetOf
			if x.uid != "" {
				x.rec.md.UID = x.uid
			}
			x.rec.mu.Unlock()
			x.log.Info("took over the state of the pod's previous launcher", "path", x.path)
		}
	}
	if err != nil {
		x.log.Warn("the state of the pod's previous launcher is not taken over", "reason", err.Error())
	}
}

// saveState writes the manager's state to its file when it changed since
// the last write. A failure is logged: the guest runs on, only a later
// launcher of the pod would know less.
func (x *stateFile) saveState() {
	if x.path == "" {
		return
	}
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	if x.stateDropped {
		return
	}
	x.rec.mu.Lock()
	s := State{HostUUID: x.hostUUID, Metadata: x.rec.md, TargetOf: x.rec.targetOf}
	if t := x.thaw.ThawAt(); !t.IsZero() {
		s.ThawAt = &t
	}
	x.rec.mu.Unlock()
	b, err := json.Marshal(s)
	if err != nil {
		x.log.Warn("save the launcher state", "reason", err.Error())
		return
	}
	if bytes.Equal(b, x.savedState) {
		return
	}
	if err := safefs.WriteFile(x.path, b, 0o600); err != nil {
		x.log.Warn("save the launcher state", "reason", err.Error())
		return
	}
	x.savedState = b
}

// DropState removes the state file when the launcher ends for good: no
// launcher takes this pod's guest over after an end the monitor believes
// (only a death by a signal or a hand-over is followed by another
// launcher, and the launcher calls this in neither case), and a state
// left behind would outlive the pod's processes as the one file they made
// that the pod's end does not remove. A refresh still finishing in the
// background does not write it again.
func (m *Manager) DropState() { m.persist.drop() }

func (x *stateFile) drop() {
	if x.path == "" {
		return
	}
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	x.stateDropped = true
	if err := safefs.Remove(x.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		x.log.Warn("remove the launcher state", "reason", err.Error())
	}
}

// resumeThaw schedules again the automatic thaw the previous launcher had
// pending (at once when its time has passed).
func (x *stateFile) resumeThaw(at time.Time) {
	x.rec.mu.Lock()
	id := x.rec.id
	x.rec.mu.Unlock()
	v := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: id.name, Namespace: id.ns, UID: types.UID(id.uid)}}
	x.thaw.ResumeThaw(v, at)
}
