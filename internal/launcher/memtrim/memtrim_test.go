package memtrim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// exeRSS sums the Rss of this executable's read-only mappings, in KiB.
func exeRSS(t *testing.T) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[5] == exe && !strings.Contains(fields[1], "w")
			continue
		}
		if in && len(fields) >= 2 && fields[0] == "Rss:" {
			n, err := strconv.Atoi(fields[1])
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

func TestTrimDropsReadOnlyMappings(t *testing.T) {
	before := exeRSS(t)
	n, err := Trim()
	if err != nil {
		t.Fatalf("Trim: %v", err)
	}
	after := exeRSS(t)
	t.Logf("dropped mappings of %d bytes; read-only RSS %d KiB -> %d KiB", n, before, after)
	if n <= 0 {
		t.Fatalf("Trim dropped %d bytes, want the executable's read-only segments", n)
	}
	// What runs between Trim and the second read (this test, the scanner,
	// the runtime) maps some pages back, but far fewer than the test
	// binary's start-up left mapped.
	if after >= before {
		t.Errorf("read-only RSS %d KiB after Trim, not below %d KiB before", after, before)
	}
	// The code is still there: the process keeps running normally,
	// faulting pages back in from the page cache.
	if got := strings.Repeat("ab", 3); got != "ababab" {
		t.Errorf("Repeat = %q", got)
	}
}
