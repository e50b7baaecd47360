package dvimport

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgress: on a terminal one line redrawn in place with bytes, rate
// and time left, ended by a newline; elsewhere plain lines.
func TestProgress(t *testing.T) {
	clock := time.Unix(0, 0)
	for _, terminal := range []bool{true, false} {
		var out bytes.Buffer
		p := &progress{w: &out, terminal: terminal, what: "DataVolume d: http://x/y", total: 100 << 20, now: func() time.Time { return clock }}
		p.start, p.last = clock, clock
		for range 4 {
			clock = clock.Add(15 * time.Second)
			p.add(10 << 20)
		}
		p.end()
		got := out.String()
		want := "DataVolume d: http://x/y: 40.0 MiB of 100.0 MiB (40 %), 682.7 KiB/s, 1m30s left"
		if !strings.Contains(got, want) {
			t.Errorf("terminal %v: %q lacks %q", terminal, got, want)
		}
		if redraws := strings.Count(got, "\r\033[K"); terminal != (redraws == 5) || strings.Count(got, "\n") != map[bool]int{true: 1, false: 5}[terminal] {
			t.Errorf("terminal %v: %d redraws, %d lines:\n%q", terminal, redraws, strings.Count(got, "\n"), got)
		}
	}
}
