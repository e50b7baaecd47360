package migration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// TestMonitor: the monitor's decisions over a sequence of readings
// (elapsed, data remaining), as KubeVirt's processInflightMigration makes
// them: progress is a reading below the previous one; whole seconds; the
// workload-disruption assist before the aborts; nothing in post-copy; a
// paused migration gets twice the time. A reading whose answer is a switch
// the caller makes (ok) is reported back, as the domain manager does; one
// it could not make (!ok) is asked for again.
func TestMonitor(t *testing.T) {
	type reading struct {
		at        time.Duration
		remaining uint64
		want      Action
		ok        bool // the switch succeeded
	}
	s := time.Second
	stuck := func(n string) Decision {
		return Decision{Action: Abort, Reason: "Live migration stuck for " + n + " seconds and has been aborted"}
	}
	late := func(n string) Decision {
		return Decision{Action: Abort, Reason: "Live migration is not completed after " + n + " seconds and has been aborted"}
	}
	for _, c := range []struct {
		name     string
		o        Options
		readings []reading
		last     Decision         // the decision at the last reading
		mode     v1.MigrationMode // the mode after it
	}{
		{"progressing", Options{ProgressTimeout: 3}, []reading{{0, 100, Continue, false}, {s, 90, Continue, false}, {2 * s, 80, Continue, false}, {5 * s, 10, Continue, false}},
			Decision{}, v1.MigrationPreCopy},
		{"stuck past the progress timeout", Options{ProgressTimeout: 3}, []reading{{0, 100, Continue, false}, {s, 100, Continue, false}, {2 * s, 100, Continue, false}, {5 * s, 100, Abort, false}},
			stuck("5"), v1.MigrationPreCopy},
		{"stuck 3.9 s of 3: whole seconds, not yet", Options{ProgressTimeout: 3}, []reading{{0, 100, Continue, false}, {3900 * time.Millisecond, 100, Continue, false}},
			Decision{}, v1.MigrationPreCopy},
		{"dirtying faster, then a drop: progress", Options{ProgressTimeout: 3}, []reading{{0, 100, Continue, false}, {s, 120, Continue, false}, {2 * s, 140, Continue, false}, {4 * s, 130, Continue, false}, {6 * s, 135, Continue, false}},
			Decision{}, v1.MigrationPreCopy},
		{"growing only", Options{ProgressTimeout: 3}, []reading{{0, 100, Continue, false}, {s, 120, Continue, false}, {2 * s, 140, Continue, false}, {4 * s, 160, Abort, false}},
			stuck("4"), v1.MigrationPreCopy},
		{"past the completion limit", Options{CompletionTimeoutPerGiB: 10}, []reading{{0, 100, Continue, false}, {5 * s, 50, Continue, false}, {10900 * time.Millisecond, 40, Continue, false}, {11 * s, 10, Abort, false}},
			late("10"), v1.MigrationPreCopy},
		{"no limits", Options{}, []reading{{0, 100, Continue, false}, {time.Hour, 100, Continue, false}}, Decision{}, v1.MigrationPreCopy},
		{"post-copy allowed, disruption not: aborted at the limit", Options{CompletionTimeoutPerGiB: 10, AllowPostCopy: true},
			[]reading{{0, 100, Continue, false}, {11 * s, 90, Abort, false}}, late("10"), v1.MigrationPreCopy},
		{"disruption and post-copy: switch at the limit, then never an abort", Options{CompletionTimeoutPerGiB: 10, ProgressTimeout: 3, AllowPostCopy: true, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {10 * s, 90, Continue, false}, {11 * s, 80, StartPostCopy, true}, {12 * s, 80, Continue, false}, {time.Hour, 80, Continue, false}},
			Decision{}, v1.MigrationPostCopy},
		{"post-copy refused by libvirt: asked again, not aborted", Options{CompletionTimeoutPerGiB: 10, AllowPostCopy: true, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {11 * s, 90, StartPostCopy, false}, {11400 * time.Millisecond, 85, StartPostCopy, true}, {30 * s, 85, Continue, false}},
			Decision{}, v1.MigrationPostCopy},
		{"disruption without post-copy: pause, twice the time, then the abort", Options{CompletionTimeoutPerGiB: 10, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {11 * s, 90, Pause, true}, {12 * s, 50, Continue, false}, {20 * s, 40, Continue, false}, {21 * s, 30, Abort, false}},
			late("20"), v1.MigrationPaused},
		{"paused once only", Options{CompletionTimeoutPerGiB: 10, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {11 * s, 90, Pause, true}, {15 * s, 10, Continue, false}},
			Decision{}, v1.MigrationPaused},
		{"the suspend failed: asked again", Options{CompletionTimeoutPerGiB: 10, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {11 * s, 90, Pause, false}, {11400 * time.Millisecond, 80, Pause, false}},
			Decision{Action: Pause}, v1.MigrationPreCopy},
		{"stuck and overdue with disruption: the assist first", Options{CompletionTimeoutPerGiB: 10, ProgressTimeout: 3, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {s, 100, Continue, false}, {11 * s, 100, Pause, true}},
			Decision{Action: Pause}, v1.MigrationPaused},
		{"paused and stuck: the progress timeout still applies", Options{CompletionTimeoutPerGiB: 10, ProgressTimeout: 3, AllowWorkloadDisruption: true},
			[]reading{{0, 100, Continue, false}, {9 * s, 50, Continue, false}, {11 * s, 40, Pause, true}, {15 * s, 40, Abort, false}},
			stuck("4"), v1.MigrationPaused},
		{"disruption with no completion limit: never assisted", Options{ProgressTimeout: 0, AllowWorkloadDisruption: true, AllowPostCopy: true},
			[]reading{{0, 100, Continue, false}, {time.Hour, 100, Continue, false}}, Decision{}, v1.MigrationPreCopy},
	} {
		m := NewMonitor(c.o, 1)
		var got Decision
		for i, r := range c.readings {
			got = m.Check(r.at, r.remaining)
			if got.Action != r.want {
				t.Errorf("%s: reading %d (%v, %d): %v, want %v", c.name, i, r.at, r.remaining, got.Action, r.want)
			}
			if r.ok {
				m.Switched(got.Action)
			}
		}
		if got != c.last {
			t.Errorf("%s: last decision %+v, want %+v", c.name, got, c.last)
		}
		if m.Mode() != c.mode {
			t.Errorf("%s: mode %s, want %s", c.name, m.Mode(), c.mode)
		}
	}
}

// TestMonitorAcceptable: the limit is CompletionTimeoutPerGiB per GB of
// data, doubled by the pause only.
func TestMonitorAcceptable(t *testing.T) {
	m := NewMonitor(Options{CompletionTimeoutPerGiB: 150}, 2)
	if got := m.Acceptable(); got != 300*time.Second {
		t.Errorf("acceptable %v, want 300s", got)
	}
	m.Switched(Abort)
	m.Switched(StartPostCopy)
	if got := m.Acceptable(); got != 300*time.Second {
		t.Errorf("after post-copy: %v, want 300s", got)
	}
	m = NewMonitor(Options{CompletionTimeoutPerGiB: 150}, 2)
	m.Switched(Pause)
	if got := m.Acceptable(); got != 600*time.Second {
		t.Errorf("after the pause: %v, want 600s", got)
	}
}

func TestSetMode(t *testing.T) {
	if SetMode(nil, v1.MigrationPaused) != nil {
		t.Error("no metadata: want none")
	}
	now := &domainjson.MigrationMetadata{UID: "m", Mode: string(v1.MigrationPreCopy)}
	next := SetMode(now, v1.MigrationPaused)
	if next.Mode != "Paused" || next.UID != "m" || now.Mode != "PreCopy" {
		t.Errorf("SetMode: %+v (was %+v), want a copy in mode Paused", next, now)
	}
	if got := SetMode(now, v1.MigrationPostCopy).Mode; got != "PostCopy" {
		t.Errorf("post-copy mode %q", got)
	}
}

func TestForDomain(t *testing.T) {
	eight := uint(8)
	for _, c := range []struct {
		name     string
		o        Options
		f        Facts
		postCopy bool // AllowPostCopy after
		threads  int  // parallel connections after; 0: one connection
		why      int  // reasons given
	}{
		{"running, post-copy allowed", Options{AllowPostCopy: true, AllowWorkloadDisruption: true}, Facts{}, true, 0, 0},
		{"paused, post-copy allowed: dropped", Options{AllowPostCopy: true, AllowWorkloadDisruption: true}, Facts{Paused: true}, false, 0, 1},
		{"paused, no post-copy", Options{AllowWorkloadDisruption: true}, Facts{Paused: true}, false, 0, 0},
		{"parallel, QEMU 7.2: one connection", Options{ParallelMigrationThreads: &eight}, Facts{QEMUVersion: 7_002_019}, false, 0, 1},
		{"parallel, QEMU 8.0", Options{ParallelMigrationThreads: &eight}, Facts{QEMUVersion: 8_000_000}, false, 8, 0},
		{"parallel, QEMU unknown: as asked", Options{ParallelMigrationThreads: &eight}, Facts{}, false, 8, 0},
		{"parallel and post-copy, QEMU 7.2: post-copy wins, nothing to drop", Options{ParallelMigrationThreads: &eight, AllowPostCopy: true}, Facts{QEMUVersion: 7_002_000}, true, 0, 0},
		{"paused, parallel and post-copy, QEMU 7.2: both dropped", Options{ParallelMigrationThreads: &eight, AllowPostCopy: true}, Facts{Paused: true, QEMUVersion: 7_002_000}, false, 0, 2},
	} {
		got, why := ForDomain(c.o, c.f)
		_, threads := got.parallel()
		if got.AllowPostCopy != c.postCopy || threads != c.threads || len(why) != c.why || got.AllowWorkloadDisruption != c.o.AllowWorkloadDisruption {
			t.Errorf("%s: %+v (%d connections), %q", c.name, got, threads, why)
		}
		if got.Compression != nil {
			t.Errorf("%s: compression %q without asking", c.name, *got.Compression)
		}
		f := Flags(got, false, c.f.Paused)
		if c.f.Paused && f&libvirt.MigratePostcopy != 0 {
			t.Errorf("%s: flags %#x ask for post-copy of a paused domain", c.name, f)
		}
		if (f&libvirt.MigrateParallel != 0) != (c.threads > 0) {
			t.Errorf("%s: flags %#x, want PARALLEL %v", c.name, f, c.threads > 0)
		}
		if c.o.ParallelMigrationThreads != nil && *c.o.ParallelMigrationThreads != 8 {
			t.Errorf("%s: the caller's thread count changed", c.name)
		}
	}
}

// TestForDomainCompression: zstd goes to libvirt only where it can
// compress: a libvirt that knows the method, parallel connections (QEMU
// 8.0 or later through the proxies); otherwise it is dropped, saying why,
// and the migration runs uncompressed.
func TestForDomainCompression(t *testing.T) {
	eight := uint(8)
	recent, old := Facts{QEMUVersion: 8_002_000, LibvirtVersion: 9_004_000}, Facts{QEMUVersion: 7_002_019, LibvirtVersion: 9_000_000}
	for _, c := range []struct {
		name    string
		o       Options
		f       Facts
		want    bool   // compressed after
		because string // the reason given; "" for none
	}{
		{"zstd, parallel, libvirt 9.4", Options{ParallelMigrationThreads: &eight, Compression: strp("zstd")}, recent, true, ""},
		{"zstd, libvirt 9.0 (this machine)", Options{ParallelMigrationThreads: &eight, Compression: strp("zstd")}, Facts{QEMUVersion: 8_002_000, LibvirtVersion: 9_000_000}, false, "libvirt 9.0.0 knows only the mt and xbzrle methods"},
		{"zstd, QEMU 7.2 and libvirt 9.0: both dropped", Options{ParallelMigrationThreads: &eight, Compression: strp("zstd")}, old, false, "not zstd"},
		{"zstd, one connection", Options{Compression: strp("zstd")}, recent, false, "compresses parallel connections only"},
		{"zstd with post-copy: one connection", Options{ParallelMigrationThreads: &eight, AllowPostCopy: true, Compression: strp("zstd")}, recent, false, "compresses parallel connections only"},
		{"none", Options{Compression: strp("none")}, recent, false, ""},
		{"empty", Options{Compression: strp("")}, recent, false, ""},
		{"unknown method: dropped as KubeVirt drops it", Options{ParallelMigrationThreads: &eight, Compression: strp("lz4")}, recent, false, `method "lz4" is not one KubeVirt knows`},
	} {
		got, why := ForDomain(c.o, c.f)
		compressed := Flags(got, false, false)&libvirt.MigrateCompressed != 0
		if compressed != c.want || (got.Compression != nil) != c.want {
			t.Errorf("%s: compressed %v (%v), want %v", c.name, compressed, got.Compression, c.want)
		}
		said := strings.Join(why, "; ")
		if c.because == "" && strings.Contains(said, "compression") || c.because != "" && !strings.Contains(said, c.because) {
			t.Errorf("%s: reasons %q, want %q", c.name, said, c.because)
		}
	}
}

// TestPostCopyUnavailable: the target QEMU's refusal, as libvirt 9.0
// reports it to the source (seen on this machine), and other failures.
func TestPostCopyUnavailable(t *testing.T) {
	for msg, want := range map[string]bool{
		"internal error: unable to execute QEMU command 'migrate-set-capabilities': Postcopy is not supported": true,
		"operation failed: migration out job: canceled by client":                                              false,
		"post-copy migration is not supported with non-live or paused migration":                               false,
	} {
		if got := PostCopyUnavailable(errors.New(msg)); got != want {
			t.Errorf("%q: %v, want %v", msg, got, want)
		}
	}
	if PostCopyUnavailable(nil) {
		t.Error("nil: want false")
	}
	if o := (Options{AllowPostCopy: true, ParallelMigrationThreads: uintp(4)}).WithoutPostCopy(); o.AllowPostCopy || Flags(o, false, false)&libvirt.MigratePostcopy != 0 {
		t.Errorf("WithoutPostCopy: %+v", o)
	}
}

func TestHazards(t *testing.T) {
	for _, c := range []struct {
		name       string
		domainType string
		qemu       uint64
		want       int
	}{
		{"TCG, QEMU 7.2: stale pages possible", "qemu", 7_002_022, 1},
		{"TCG, QEMU 8.2", "qemu", 8_002_000, 1},
		{"TCG, QEMU 9.0: fixed", "qemu", 9_000_000, 0},
		{"KVM, QEMU 7.2: KVM logs dirty pages itself", "kvm", 7_002_022, 0},
		{"TCG, QEMU unknown: nothing claimed", "qemu", 0, 0},
	} {
		h := Hazards(c.domainType, c.qemu)
		if len(h) != c.want {
			t.Errorf("%s: %q, want %d hazards", c.name, h, c.want)
		}
		for _, s := range h {
			if !strings.Contains(s, "03bfc2188f") || !strings.Contains(s, versionString(c.qemu)) {
				t.Errorf("%s: %q does not name the QEMU version and the fix", c.name, s)
			}
		}
	}
}
