package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

// stateFile keeps the Manager m's State in the state file: the one a
// previous launcher of the pod left, taken over (takeOverState), and this
// launcher's, written when it changes (saveState).
type stateFile struct {
	m *Manager

	// restoredThaw is the automatic thaw a previous launcher of the pod
	// had pending, taken over once connected (nil: none).
	restoredThaw *time.Time
	// saveMu orders the writes of the state file; savedState is what
	// was last written (saveState).
	saveMu     sync.Mutex
	savedState []byte
	// stateDropped: the launcher ends for good (DropState); the state file
	// is not written again.
	stateDropped bool
}

// takeOverState reads the state a previous launcher of this pod left, if
// any, into the new manager.
func (x *stateFile) takeOverState() {
	m := x.m
	if m.cfg.StateFile == "" {
		return
	}
	s, ok, err := LoadState(m.cfg.StateFile)
	if err == nil && ok {
		var md domainjson.Metadata
		md, m.persist.restoredThaw, err = restoreState(s, m.cfg.UID, time.Now())
		if err == nil {
			m.md, m.mig.targetOf = md, s.TargetOf
			if m.cfg.UID != "" {
				m.md.UID = m.cfg.UID
			}
			m.log.Info("took over the state of the pod's previous launcher", "path", m.cfg.StateFile)
		}
	}
	if err != nil {
		m.log.Warn("the state of the pod's previous launcher is not taken over", "reason", err.Error())
	}
}

// saveState writes the manager's state to its file when it changed since
// the last write. A failure is logged: the guest runs on, only a later
// launcher of the pod would know less.
func (x *stateFile) saveState() {
	m := x.m
	if m.cfg.StateFile == "" {
		return
	}
	m.persist.saveMu.Lock()
	defer m.persist.saveMu.Unlock()
	if m.persist.stateDropped {
		return
	}
	m.mu.Lock()
	s := State{HostUUID: m.cfg.HostUUID, Metadata: m.md, TargetOf: m.mig.targetOf}
	if t := m.guest.ThawAt(); !t.IsZero() {
		s.ThawAt = &t
	}
	m.mu.Unlock()
	b, err := json.Marshal(s)
	if err != nil {
		m.log.Warn("save the launcher state", "reason", err.Error())
		return
	}
	if bytes.Equal(b, m.persist.savedState) {
		return
	}
	if err := safefs.WriteFile(m.cfg.StateFile, b, 0o600); err != nil {
		m.log.Warn("save the launcher state", "reason", err.Error())
		return
	}
	m.persist.savedState = b
}

// DropState removes the state file when the launcher ends for good: no
// launcher takes this pod's guest over after an end the monitor believes
// (only a death by a signal or a hand-over is followed by another
// launcher, and the launcher calls this in neither case), and a state
// left behind would outlive the pod's processes as the one file they made
// that the pod's end does not remove. A refresh still finishing in the
// background does not write it again.
func (m *Manager) DropState() {
	if m.cfg.StateFile == "" {
		return
	}
	m.persist.saveMu.Lock()
	defer m.persist.saveMu.Unlock()
	m.persist.stateDropped = true
	if err := safefs.Remove(m.cfg.StateFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("remove the launcher state", "reason", err.Error())
	}
}

// resumeThaw schedules again the automatic thaw the previous launcher had
// pending (at once when its time has passed).
func (x *stateFile) resumeThaw(at time.Time) {
	m := x.m
	m.mu.Lock()
	v := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: m.id.name, Namespace: m.id.ns, UID: types.UID(m.id.uid)}}
	m.mu.Unlock()
	m.guest.ResumeThaw(v, at)
}
