package migration

import (
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// Action is what the source's monitor does about a running migration
// after a reading of its job.
type Action int

const (
	// Continue: let it run.
	Continue Action = iota
	// StartPostCopy: switch the migration to post-copy (the guest goes on
	// running in the target while the rest of its memory follows).
	StartPostCopy
	// Pause: suspend the source's guest, so that its memory stops
	// changing and the migration can finish.
	Pause
	// Abort: abort the migration job, for Decision.Reason (in KubeVirt
	// v1.9 the monitor's abort is a cancel: AbortStatus Aborting, then
	// the job's abort; Reason is for the log).
	Abort
	// SetDowntime: set the migration's downtime limit to
	// Decision.Downtime (virDomainMigrateSetMaxDowntime).
	SetDowntime
	// MarkPaused: QEMU paused the guest for its switch-over; record the
	// Paused mode (no call to make).
	MarkPaused
)

func (a Action) String() string {
	switch a {
	case Continue:
		return "continue"
	case StartPostCopy:
		return "start post-copy"
	case Pause:
		return "pause"
	case Abort:
		return "abort"
	case SetDowntime:
		return "set the downtime limit"
	case MarkPaused:
		return "mark paused"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is the monitor's answer to one reading.
type Decision struct {
	Action Action
	// Reason is the failure reason recorded for an Abort (KubeVirt's
	// words: virt-handler shows it).
	Reason string
	// Downtime is SetDowntime's limit, in ms.
	Downtime uint64
	step     stallStep     // the stall detector's: where it came from
	at       time.Duration // the stall detector's: the reading's time
}

// Monitor is the source's decision on a running migration, reading by
// reading (KubeVirt v1.8.2's processInflightMigration). In this order:
//   - in post-copy, nothing more: the target runs the guest already, and an
//     abort would lose it;
//   - past the completion limit with AllowWorkloadDisruption, and not
//     paused yet: switch to post-copy when AllowPostCopy, else pause the
//     guest (which doubles the limit, so that the paused migration has
//     time to finish);
//   - no progress (remaining data below the lowest reading so far) for
//     more than ProgressTimeout: abort;
//   - past the completion limit: abort.
//
// Times are compared in whole seconds, as KubeVirt compares them. A switch
// the caller could not make is asked for again at the next reading; the
// caller reports the ones it made with Switched.
type Monitor struct {
	progressTimeout int64 // seconds; 0: none
	acceptable      int64 // seconds; 0: no limit
	disruption      bool  // AllowWorkloadDisruption
	postCopy        bool  // AllowPostCopy
	mode            v1.MigrationMode
	watermark       uint64        // the previous reading of the remaining data
	progressAt      time.Duration // elapsed at the last progress
}

// NewMonitor is the monitor of a migration of sizeGB (DataSize) under o.
func NewMonitor(o Options, sizeGB int64) *Monitor {
	return &Monitor{
		progressTimeout: o.ProgressTimeout,
		acceptable:      int64(Acceptable(o, sizeGB) / time.Second),
		disruption:      o.AllowWorkloadDisruption,
		postCopy:        o.AllowPostCopy,
		mode:            v1.MigrationPreCopy,
	}
}

// Mode is the migration's mode now: PreCopy, PostCopy or Paused.
func (m *Monitor) Mode() v1.MigrationMode { return m.mode }

// Acceptable is the completion limit now (doubled once paused).
func (m *Monitor) Acceptable() time.Duration { return time.Duration(m.acceptable) * time.Second }

// Check decides on a reading: elapsed since the migration started, and the
// data it has yet to move.
func (m *Monitor) Check(elapsed time.Duration, remaining uint64) Decision {
	if m.watermark == 0 || remaining < m.watermark {
		m.progressAt = elapsed
	}
	m.watermark = remaining
	overdue := m.acceptable > 0 && int64(elapsed/time.Second) > m.acceptable
	switch {
	case m.mode == v1.MigrationPostCopy:
		return Decision{Action: Continue}
	case overdue && m.disruption && m.mode != v1.MigrationPaused:
		if m.postCopy {
			return Decision{Action: StartPostCopy}
		}
		return Decision{Action: Pause}
	}
	if stuck := int64((elapsed - m.progressAt) / time.Second); m.progressTimeout > 0 && stuck > m.progressTimeout {
		return Decision{Action: Abort, Reason: fmt.Sprintf("Live migration stuck for %d seconds and has been aborted", stuck)}
	}
	if overdue {
		return Decision{Action: Abort, Reason: fmt.Sprintf("Live migration is not completed after %d seconds and has been aborted", m.acceptable)}
	}
	return Decision{Action: Continue}
}

// Switched records a switch the caller made: post-copy, or the pause
// (which doubles the completion limit). Other actions change nothing.
func (m *Monitor) Switched(a Action) {
	switch a {
	case StartPostCopy:
		m.mode = v1.MigrationPostCopy
	case Pause:
		m.mode = v1.MigrationPaused
		m.acceptable *= 2
	}
}

// SetMode records the migration's mode in its metadata (KubeVirt's
// updateVMIMigrationMode): a copy with Mode set; no metadata stays none.
func SetMode(now *domainjson.MigrationMetadata, mode v1.MigrationMode) *domainjson.MigrationMetadata {
	if now == nil {
		return nil
	}
	next := *now
	next.Mode = string(mode)
	return &next
}
