package domain

import (
	"testing"
	"time"
)

// TestMigrationMonitor: the monitor's abort decision over a sequence of
// readings (elapsed, data remaining), as KubeVirt's processInflightMigration
// makes it for pre-copy: progress is a reading below the previous one.
func TestMigrationMonitor(t *testing.T) {
	type reading struct {
		at        time.Duration
		remaining uint64
	}
	s := time.Second
	for _, c := range []struct {
		name                 string
		progress, acceptable time.Duration
		readings             []reading
		want                 string // the reason at the last reading, "" none
	}{
		{"progressing", 3 * s, 0, []reading{{0, 100}, {s, 90}, {2 * s, 80}, {5 * s, 10}}, ""},
		{"stuck past the progress timeout", 3 * s, 0, []reading{{0, 100}, {s, 100}, {2 * s, 100}, {5 * s, 100}},
			"Live migration stuck for 5 seconds and has been aborted"},
		{"stuck, not yet long enough", 3 * s, 0, []reading{{0, 100}, {s, 100}, {3 * s, 100}}, ""},
		{"dirtying faster, then a drop: progress", 3 * s, 0, []reading{{0, 100}, {s, 120}, {2 * s, 140}, {4 * s, 130}, {6 * s, 135}}, ""},
		{"growing only", 3 * s, 0, []reading{{0, 100}, {s, 120}, {2 * s, 140}, {4 * s, 160}, {5 * s, 170}},
			"Live migration stuck for 5 seconds and has been aborted"},
		{"past the completion limit", 0, 10 * s, []reading{{0, 100}, {5 * s, 50}, {11 * s, 10}},
			"Live migration is not completed after 10 seconds and has been aborted"},
		{"no limits", 0, 0, []reading{{0, 100}, {time.Hour, 100}}, ""},
	} {
		mm := migrationMonitor{progressTimeout: c.progress, acceptable: c.acceptable}
		var got string
		for _, r := range c.readings {
			got = mm.check(r.at, r.remaining)
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
