package migration

import (
	"container/heap"
	"fmt"
	"math"
	"time"

	v1 "kubevirt.io/api/core/v1"
)

// QEMU's bounds on a migration's downtime limit, as KubeVirt v1.9 uses
// them: the most it may be set to, and QEMU's own default.
const (
	maxDowntimeLimitMs     uint64 = 2_000_000
	defaultDowntimeLimitMs uint64 = 300
)

// Job is one reading of the migration job's statistics (virDomainGetJobStats)
// as the stall detector uses them; a field not set is not known.
type Job struct {
	// Unbounded: a migration job runs.
	Unbounded                                  bool
	RemainingSet, ElapsedSet, IterationSet     bool
	BpsSet                                     bool
	Remaining, ElapsedMs, Iteration, MemoryBps uint64 // bytes, ms, count, bytes/s
}

// Reading is what the caller saw of a running migration.
type Reading struct {
	// Elapsed is the wall time since the migration's monitor started.
	Elapsed time.Duration
	// Boundary: the reading follows a migration iteration event (QEMU
	// began a new pass over the guest's memory).
	Boundary bool
	// Job is the job's statistics; nil when they could not be read.
	Job *Job
	// PausedForMigration: the domain is paused by the migration (QEMU's
	// own switch-over stopped the guest).
	PausedForMigration bool
	// Aborting: an abort is in progress (or succeeded).
	Aborting bool
}

// stallStep says which part of a reading's pass a decision comes from:
// what its success changes depends on it.
type stallStep int

const (
	stepNone stallStep = iota
	stepInitialDowntime
	stepConvergence
	stepCompletion
)

// record is a reading at an iteration boundary.
type record struct {
	elapsedMs, remaining, iteration uint64
}

// Stall is KubeVirt v1.9's stall detector (VEP 248), the monitor used
// when the options carry StallDetectorOptions. Pre-copy sends the guest's
// memory in passes while the guest dirties more; a migration is stalled
// when, at the start of a pass, the data left is not at least StallMargin
// below the best start of a pass older than StallProgressTimeout. Then it
// waits for a pass starting near its best (SearchLocalMinima, the best
// relaxed as time goes by) and, when the estimated transfer of what is
// left fits before the completion deadline, forces the switch-over:
// post-copy (AllowWorkloadDisruption and AllowPostCopy), a downtime limit
// of QEMU's maximum (AllowWorkloadDisruption), MaxDowntimeMs when the
// estimated downtime is within PrecopyPossibleFactor of it, or else the
// abort. Past the completion limit (switch-over deadline) it starts
// post-copy when allowed, forces the switch-over with workload
// disruption, or aborts. From its first reading on it lowers QEMU's
// downtime limit to MaxDowntimeMs when that is below QEMU's 300 ms.
//
// It touches nothing: Check gives the caller its decisions for a reading
// in the order to make them, and Done takes each outcome back.
type Stall struct {
	o         StallDetectorOptions
	maxDown   uint64
	postCopy  bool
	disrupt   bool
	mode      v1.MigrationMode
	initial   bool  // the initial downtime limit is set
	accept    int64 // completion limit, seconds; 0: none
	switchDue int64 // switch-over deadline, seconds

	last     record // the last record taken (boundary, or paused/post-copy)
	ewma     float64
	cands    []record // strictly falling remaining data, newest last
	outside  record   // the best record older than the window
	haveOut  bool
	stalled  bool
	best     uint64
	history  *minHeap
	patience uint64 // ms
	relaxAt  uint64 // ms of job time
	switched bool   // a switch-over (or abort) was asked for
}

// NewStall is the stall detector of a migration of sizeGB (DataSize) under
// o, whose StallDetectorOptions must be set.
func NewStall(o Options, sizeGB int64) *Stall {
	acc := int64(Acceptable(o, sizeGB) / time.Second)
	return &Stall{
		o:         *o.StallDetectorOptions,
		maxDown:   o.MaxDowntimeMs,
		postCopy:  o.AllowPostCopy,
		disrupt:   o.AllowWorkloadDisruption,
		mode:      v1.MigrationPreCopy,
		accept:    acc,
		switchDue: acc,
	}
}

// Mode is the migration's mode now.
func (s *Stall) Mode() v1.MigrationMode { return s.mode }

// Check decides on a reading: the decisions, in the order the caller makes
// them, each reported back with Done before the next reading. A
// MarkPaused decision takes no call: the caller records the mode.
func (s *Stall) Check(r Reading) []Decision {
	var out []Decision
	if !s.initial {
		out = append(out, Decision{Action: SetDowntime, Downtime: min(s.maxDown, defaultDowntimeLimitMs),
			Reason: "the initial downtime limit", step: stepInitialDowntime})
	}
	if r.PausedForMigration && s.mode != v1.MigrationPaused && s.mode != v1.MigrationPostCopy {
		s.mode = v1.MigrationPaused
		out = append(out, Decision{Action: MarkPaused, Reason: "QEMU paused the guest for the switch-over"})
	}
	if r.Aborting {
		return out
	}
	if j := r.Job; j != nil && j.Unbounded && j.RemainingSet && j.ElapsedSet && j.IterationSet {
		rec := record{elapsedMs: j.ElapsedMs, remaining: j.Remaining, iteration: j.Iteration}
		switch {
		case r.Boundary:
			s.last = rec
			if s.iteration(rec) {
				if d := s.decide(rec, s.estimate(rec), r.Elapsed); d.Action != Continue {
					s.switched = true
					d.step, d.at = stepConvergence, r.Elapsed
					return append(out, d)
				}
			}
		case s.mode == v1.MigrationPaused || s.mode == v1.MigrationPostCopy:
			s.last = rec
		case j.BpsSet:
			s.bandwidth(j.MemoryBps)
		}
	}
	if d := s.completion(r.Elapsed, s.estimate(s.last)); d.Action != Continue {
		d.step, d.at = stepCompletion, r.Elapsed
		out = append(out, d)
	}
	return out
}

// Done takes back the outcome of a decision Check made.
func (s *Stall) Done(d Decision, ok bool) {
	sec := int64(d.at / time.Second)
	switch d.step {
	case stepInitialDowntime:
		s.initial = s.initial || ok
	case stepConvergence:
		switch {
		case !ok && d.Action != Abort:
			s.switched = false
		case ok && d.Action == StartPostCopy:
			s.mode = v1.MigrationPostCopy
		case ok && d.Action == SetDowntime:
			// Stop-and-copy may not start at once, or ever: the
			// completion deadline applies again after the switch-over's.
			s.switchDue = sec + int64(s.o.SwitchoverTimeout)
		}
	case stepCompletion:
		switch {
		case !ok || d.Action == Abort:
		case d.Action == StartPostCopy:
			s.mode, s.switched = v1.MigrationPostCopy, true
		case d.Action == SetDowntime:
			s.accept = s.scaled(s.accept)
			s.switchDue = sec + int64(s.o.SwitchoverTimeout)
			s.switched = true
		}
	}
}

// bandwidth folds a sample into the moving average.
func (s *Stall) bandwidth(bps uint64) {
	if s.ewma == 0 {
		s.ewma = float64(bps)
		return
	}
	s.ewma = s.o.EwmaAlpha*float64(bps) + (1-s.o.EwmaAlpha)*s.ewma
}

// estimate is the time, in ms, the data left at rec takes at the average
// bandwidth; 0 while no bandwidth is known.
func (s *Stall) estimate(rec record) uint32 {
	if s.ewma == 0 {
		return 0
	}
	ms := float64(rec.remaining) / (s.ewma / 1000)
	if ms > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(ms)
}

// scaled is a limit in seconds times CompletionTimeoutFactor.
func (s *Stall) scaled(sec int64) int64 {
	return int64(float64(sec) * s.o.CompletionTimeoutFactor)
}

// fits says whether estMs fits in what is left before deadline (seconds).
func (s *Stall) fits(elapsed, deadline int64, estMs uint32) bool {
	return s.ewma != 0 && int64(estMs) <= (deadline-elapsed)*1000
}

// iteration takes a boundary record; true when the migration is stalled.
func (s *Stall) iteration(rec record) bool {
	if s.ewma == 0 || s.switched {
		return false
	}
	s.candidate(rec)
	if s.stalled {
		s.relax(rec)
		return true
	}
	if !s.haveOut || float64(rec.remaining) < float64(s.outside.remaining)*(1-s.o.StallMargin) {
		return false
	}
	s.stalled = true
	s.best = s.outside.remaining
	for _, c := range s.cands {
		s.best = min(s.best, c.remaining)
	}
	s.history = &minHeap{}
	s.patience = s.o.StallProgressTimeout * 1000
	s.relaxAt = rec.elapsedMs + s.patience
	return true
}

// candidate ages records out of the window into the best one outside it,
// and keeps rec when it could become that best.
func (s *Stall) candidate(rec record) {
	window := s.o.StallProgressTimeout * 1000
	for len(s.cands) > 0 && rec.elapsedMs-s.cands[0].elapsedMs >= window {
		if old := s.cands[0]; !s.haveOut || old.remaining < s.outside.remaining {
			s.outside, s.haveOut = old, true
		}
		s.cands = s.cands[1:]
	}
	if s.haveOut && rec.remaining > s.outside.remaining {
		return
	}
	if n := len(s.cands); n > 0 && rec.remaining >= s.cands[n-1].remaining {
		return
	}
	s.cands = append(s.cands, rec)
}

// relax lets the best remaining data go up to the next best seen, after a
// patience that shrinks each time, so that a stalled migration that never
// reaches its old best still finds a point to switch over at.
func (s *Stall) relax(rec record) {
	heap.Push(s.history, rec.remaining)
	if rec.elapsedMs < s.relaxAt {
		return
	}
	s.best = heap.Pop(s.history).(uint64)
	s.patience = uint64(float64(s.patience) * s.o.PatienceWindowDecayFactor)
	s.relaxAt = rec.elapsedMs + s.patience
}

// decide is the convergence action for a stalled migration at rec.
func (s *Stall) decide(rec record, estMs uint32, elapsed time.Duration) Decision {
	if s.switched {
		return Decision{}
	}
	if s.o.SearchLocalMinima && float64(rec.remaining) > float64(s.best)*(1+s.o.StallMargin) {
		return Decision{}
	}
	if !s.fits(int64(elapsed/time.Second), s.scaled(s.accept), estMs) {
		return Decision{}
	}
	switch {
	case s.disrupt && s.postCopy:
		return Decision{Action: StartPostCopy, Reason: fmt.Sprintf("estimated transfer time %dms is a local minima", estMs)}
	case s.disrupt:
		return Decision{Action: SetDowntime, Downtime: maxDowntimeLimitMs, Reason: fmt.Sprintf("estimated downtime %dms is a local minima", estMs)}
	case uint64(estMs) <= s.maxDown:
		return Decision{Action: SetDowntime, Downtime: s.maxDown, Reason: fmt.Sprintf("estimated downtime %dms within max allowed downtime %dms", estMs, s.maxDown)}
	case float64(estMs) <= float64(s.maxDown)*s.o.PrecopyPossibleFactor:
		return Decision{Action: SetDowntime, Downtime: s.maxDown, Reason: fmt.Sprintf("estimated downtime %dms within tolerable factor %.2fx to max allowed downtime %dms", estMs, s.o.PrecopyPossibleFactor, s.maxDown)}
	}
	return Decision{Action: Abort, Reason: fmt.Sprintf("estimated downtime %dms exceeds max allowed downtime %dms by a factor of more than x%.2f", estMs, s.maxDown, s.o.PrecopyPossibleFactor)}
}

// completion is the decision past the completion limit (paused) or the
// switch-over deadline.
func (s *Stall) completion(elapsed time.Duration, estMs uint32) Decision {
	sec := int64(elapsed / time.Second)
	due := s.switchDue
	if s.mode == v1.MigrationPaused {
		due = s.accept
	}
	if s.accept == 0 || sec <= due || s.mode == v1.MigrationPostCopy {
		return Decision{}
	}
	if s.ewma == 0 {
		return Decision{Action: Abort, Reason: "no bandwidth known at the completion timeout"}
	}
	if !s.switched && s.fits(sec, s.scaled(s.accept), estMs) {
		if s.postCopy {
			return Decision{Action: StartPostCopy, Reason: "completion timeout reached: post-copy to force convergence"}
		}
		if s.disrupt {
			return Decision{Action: SetDowntime, Downtime: maxDowntimeLimitMs, Reason: "completion timeout reached: the largest downtime limit to force the switch-over"}
		}
	}
	return Decision{Action: Abort, Reason: fmt.Sprintf("completion timeout: %d s elapsed, %d s acceptable", sec, s.accept)}
}

// minHeap is the remaining data seen since the stall, smallest first.
type minHeap []uint64

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
