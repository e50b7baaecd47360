package migration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"
)

const mib = 1 << 20

// stallOpts are KubeVirt v1.9's defaults for the stall detector, with a
// 10 s window, MaxDowntimeMs 900 and 150 s of completion time per GB.
func stallOpts(change func(*Options)) Options {
	sd := StallDetectorOptions{StallMargin: 0.04, StallProgressTimeout: 10, SwitchoverTimeout: 60, EwmaAlpha: 0.4,
		PrecopyPossibleFactor: 1.5, PatienceWindowDecayFactor: 0.5, SearchLocalMinima: true, CompletionTimeoutFactor: 2}
	o := Options{MaxDowntimeMs: 900, CompletionTimeoutPerGiB: 150, StallDetectorOptions: &sd}
	if change != nil {
		change(&o)
	}
	return o
}

// poll is a reading between passes at wall time sec: the bandwidth sample.
func poll(sec float64, bps uint64) Reading {
	return Reading{Elapsed: time.Duration(sec * float64(time.Second)),
		Job: &Job{Unbounded: true, RemainingSet: true, ElapsedSet: true, IterationSet: true, BpsSet: true, Remaining: 1, ElapsedMs: uint64(sec * 1000), MemoryBps: bps}}
}

// pass is the reading at the start of a pass at wall time sec (the job's
// time the same), with remaining bytes left.
func pass(sec float64, remaining uint64) Reading {
	r := poll(sec, 0)
	r.Boundary, r.Job.Remaining, r.Job.BpsSet = true, remaining, false
	return r
}

// step is a reading, the decisions wanted ("action" or "action:downtime"),
// and whether the caller's calls succeed.
type step struct {
	r    Reading
	want string
	fail bool
}

func render(ds []Decision) string {
	var s []string
	for _, d := range ds {
		if d.Action == SetDowntime {
			s = append(s, fmt.Sprintf("%s:%d", d.Action, d.Downtime))
		} else {
			s = append(s, d.Action.String())
		}
	}
	return strings.Join(s, ", ")
}

// TestStall: the stall detector's decisions over readings, as KubeVirt
// v1.9's launcher makes them. Every case but the first two has its initial
// downtime limit (300 ms: MaxDowntimeMs 900 is above QEMU's default) set
// at the first reading.
func TestStall(t *testing.T) {
	const down = "set the downtime limit:300"
	// A stalled migration: 8 MiB left at the start of each pass, every
	// 8 s, so the pass at 16 s is measured against the one at 0 s, outside
	// the 10 s window, and is no better.
	stalled := func(bps uint64) []step {
		return []step{{poll(0.4, bps), down, false}, {pass(1, 8*mib), "", false}, {pass(9, 8*mib), "", false}}
	}
	for _, c := range []struct {
		name   string
		o      Options
		steps  []step
		reason string // the last decision's reason contains it
		mode   v1.MigrationMode
	}{
		{"initial limit: MaxDowntimeMs below QEMU's 300 ms", stallOpts(func(o *Options) { o.MaxDowntimeMs = 100 }),
			[]step{{poll(0.4, mib), "set the downtime limit:100", false}, {poll(0.8, mib), "", false}}, "", v1.MigrationPreCopy},
		{"initial limit failed: asked again", stallOpts(nil),
			[]step{{poll(0.4, mib), down, true}, {poll(0.8, mib), down, false}, {poll(1.2, mib), "", false}}, "", v1.MigrationPreCopy},
		{"converging: nothing to do", stallOpts(nil),
			[]step{{poll(0.4, mib), down, false}, {pass(1, 80*mib), "", false}, {pass(9, 40*mib), "", false}, {pass(17, 20*mib), "", false}, {pass(25, 10*mib), "", false}}, "", v1.MigrationPreCopy},
		{"stalled, the downtime far beyond the limit: abort", stallOpts(nil),
			append(stalled(mib), step{pass(17, 8*mib), "abort", false}),
			"estimated downtime 8000ms exceeds max allowed downtime 900ms by a factor of more than x1.50", v1.MigrationPreCopy},
		{"stalled, 0.3 pct better: still stalled", stallOpts(nil),
			append(stalled(mib), step{pass(17, 8*mib-25000), "abort", false}), "exceeds max allowed downtime", v1.MigrationPreCopy},
		{"5 pct better: progress, not a stall", stallOpts(nil),
			append(stalled(mib), step{pass(17, 8*mib*95/100), "", false}), "", v1.MigrationPreCopy},
		{"stalled, within the limit: stop-and-copy at MaxDowntimeMs", stallOpts(nil),
			append(stalled(16*mib), step{pass(17, 8*mib), "set the downtime limit:900", false}, step{pass(25, 8*mib), "", false}),
			"estimated downtime 500ms within max allowed downtime 900ms", v1.MigrationPreCopy},
		{"stalled, within the factor: stop-and-copy at MaxDowntimeMs", stallOpts(nil),
			append(stalled(7*mib), step{pass(17, 8*mib), "set the downtime limit:900", false}),
			"estimated downtime 1142ms within tolerable factor 1.50x", v1.MigrationPreCopy},
		{"disruption and post-copy: post-copy at the stall", stallOpts(func(o *Options) { o.AllowPostCopy, o.AllowWorkloadDisruption = true, true }),
			append(stalled(mib), step{pass(17, 8*mib), "start post-copy", false}, step{pass(25, 8*mib), "", false}, step{poll(500, mib), "", false}),
			"is a local minima", v1.MigrationPostCopy},
		{"post-copy refused: asked again at the next pass", stallOpts(func(o *Options) { o.AllowPostCopy, o.AllowWorkloadDisruption = true, true }),
			append(stalled(mib), step{pass(17, 8*mib), "start post-copy", true}, step{pass(25, 8*mib), "start post-copy", false}),
			"", v1.MigrationPostCopy},
		{"disruption without post-copy: QEMU's largest limit", stallOpts(func(o *Options) { o.AllowWorkloadDisruption = true }),
			append(stalled(mib), step{pass(17, 8*mib), "set the downtime limit:2000000", false}), "", v1.MigrationPreCopy},
		{"not at the best pass: wait for one near it", stallOpts(nil),
			append(stalled(mib), step{pass(17, 9*mib), "", false}, step{pass(25, 8*mib+100000), "abort", false}), "", v1.MigrationPreCopy},
		{"never near the best: the best relaxes after the window", stallOpts(func(o *Options) { o.StallDetectorOptions.SearchLocalMinima = true }),
			append(stalled(mib), step{pass(17, 10*mib), "", false}, step{pass(21, 11*mib), "", false}, step{pass(27, 10*mib), "abort", false}), "", v1.MigrationPreCopy},
		{"without local minima search: at the stall", stallOpts(func(o *Options) { o.StallDetectorOptions.SearchLocalMinima = false }),
			append(stalled(mib), step{pass(17, 9*mib), "abort", false}), "", v1.MigrationPreCopy},
		{"no completion limit: never acts", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB = 0 }),
			append(stalled(mib), step{pass(17, 8*mib), "", false}, step{poll(5000, mib), "", false}), "", v1.MigrationPreCopy},
		{"the estimate does not fit before the deadline: nothing", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB = 20 }),
			append(stalled(mib/4), step{pass(17, 8*mib), "", false}), "", v1.MigrationPreCopy},
		{"completion limit, nothing allowed: abort", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB = 10 }),
			[]step{{poll(0.4, mib), down, false}, {poll(10.9, mib), "", false}, {poll(11, mib), "abort", false}}, "completion timeout", v1.MigrationPreCopy},
		{"completion limit, post-copy allowed: post-copy, even without disruption", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB, o.AllowPostCopy = 10, true }),
			[]step{{poll(0.4, mib), down, false}, {poll(11, mib), "start post-copy", false}, {poll(100, mib), "", false}}, "", v1.MigrationPostCopy},
		{"completion limit, disruption: largest limit, then twice the time and the switch-over's", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB, o.AllowWorkloadDisruption = 10, true }),
			[]step{{poll(0.4, mib), down, false}, {poll(11, mib), "set the downtime limit:2000000", false}, {poll(71, mib), "", false}, {poll(72, mib), "abort", false}}, "20 s acceptable", v1.MigrationPreCopy},
		{"completion limit, the limit refused: asked again", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB, o.AllowWorkloadDisruption = 10, true }),
			[]step{{poll(0.4, mib), down, false}, {poll(11, mib), "set the downtime limit:2000000", true}, {poll(11.4, mib), "set the downtime limit:2000000", false}}, "", v1.MigrationPreCopy},
		{"completion limit with no bandwidth known: abort", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB = 10 }),
			[]step{{Reading{Elapsed: 11 * time.Second}, down + ", abort", false}}, "no bandwidth", v1.MigrationPreCopy},
		{"after a stop-and-copy, the switch-over's deadline", stallOpts(nil),
			append(stalled(16*mib), step{pass(17, 8*mib), "set the downtime limit:900", false}, step{poll(77, mib), "", false}, step{poll(78, mib), "abort", false}), "", v1.MigrationPreCopy},
		{"QEMU pauses the guest: the mode, once; the completion limit applies", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB = 10 }),
			[]step{{poll(0.4, mib), down, false}, {Reading{Elapsed: 5 * time.Second, PausedForMigration: true}, "mark paused", false},
				{Reading{Elapsed: 6 * time.Second, PausedForMigration: true}, "", false}, {Reading{Elapsed: 11 * time.Second, PausedForMigration: true}, "abort", false}}, "", v1.MigrationPaused},
		{"an abort in progress: nothing more", stallOpts(func(o *Options) { o.CompletionTimeoutPerGiB = 10 }),
			[]step{{poll(0.4, mib), down, false}, {Reading{Elapsed: 30 * time.Second, Aborting: true}, "", false}}, "", v1.MigrationPreCopy},
	} {
		s := NewStall(c.o, 1)
		var last Decision
		for i, st := range c.steps {
			ds := s.Check(st.r)
			if got := render(ds); got != st.want {
				t.Errorf("%s: reading %d (%v, boundary %v): %q, want %q", c.name, i, st.r.Elapsed, st.r.Boundary, got, st.want)
			}
			for _, d := range ds {
				s.Done(d, !st.fail)
				last = d
			}
		}
		if c.reason != "" && !strings.Contains(last.Reason, c.reason) {
			t.Errorf("%s: last reason %q, want it to say %q", c.name, last.Reason, c.reason)
		}
		if s.Mode() != c.mode {
			t.Errorf("%s: mode %s, want %s", c.name, s.Mode(), c.mode)
		}
	}
}

// TestStallBandwidth: the moving average of the bandwidth (EwmaAlpha 0.4),
// as the estimate shows it: 10 MiB take 1000 ms at 10 MiB/s.
func TestStallBandwidth(t *testing.T) {
	s := NewStall(stallOpts(nil), 1)
	s.Check(poll(0.4, 10*mib))
	if got := s.estimate(record{remaining: 10 * mib}); got != 1000 {
		t.Errorf("first sample: %d ms, want 1000", got)
	}
	s.Check(poll(0.8, 20*mib)) // 0.4×20 + 0.6×10 = 14 MiB/s
	if got := s.estimate(record{remaining: 14 * mib}); got < 999 || got > 1000 {
		t.Errorf("after a second sample: %d ms, want 1000", got)
	}
	s.Check(pass(1, 100)) // a pass start is no bandwidth sample
	if got := s.estimate(record{remaining: 14 * mib}); got < 999 || got > 1000 {
		t.Errorf("after a pass: %d ms, want 1000", got)
	}
}
