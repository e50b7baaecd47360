package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		name, line string
		want       Stat
		bad        bool
	}{
		{name: "full", line: "42 (vlctl) S 7 42 42 0 -1 4194560 1 0 0 0 31 17 0 0 20 0 8 0 98765 0 0",
			want: Stat{PID: 42, PPID: 7, Comm: "vlctl", State: 'S', StartTime: 98765, UTime: 31, STime: 17}},
		{name: "parens and spaces in comm", line: "42 (a) b (c) Z 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5 0",
			want: Stat{PID: 42, PPID: 1, Comm: "a) b (c", State: 'Z', StartTime: 5}},
		{name: "short line: no start time", line: "42 (x) R 3",
			want: Stat{PID: 42, PPID: 3, Comm: "x", State: 'R'}},
		{name: "no comm", line: "42 R 3", bad: true},
		{name: "no ppid", line: "42 (x) R", bad: true},
		{name: "bad ppid", line: "42 (x) R y 1 2", bad: true},
		{name: "bad utime", line: "42 (x) R 1 0 0 0 0 0 0 0 0 0 u 0 0 0 0 0 0 0 5 0", bad: true},
		{name: "bad start time", line: "42 (x) R 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 zz 0", bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStat(42, []byte(c.line))
			if c.bad {
				if err == nil {
					t.Fatalf("ParseStat(%q) = %+v, want an error", c.line, got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseStat(%q) = %+v, %v; want %+v", c.line, got, err, c.want)
			}
		})
	}
}

func TestReadStatSelf(t *testing.T) {
	s, err := ReadStat("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.PPID != os.Getppid() || s.StartTime == 0 {
		t.Errorf("own stat %+v: ppid want %d, a start time", s, os.Getppid())
	}
	if !IsAncestor("/proc", os.Getppid(), os.Getpid()) || !IsAncestor("/proc", os.Getpid(), os.Getpid()) {
		t.Error("parent not found as ancestor")
	}
	if IsAncestor("/proc", os.Getpid(), os.Getppid()) {
		t.Error("child found as ancestor of its parent")
	}
}

func TestIsAncestorFake(t *testing.T) {
	root := t.TempDir()
	for pid, line := range map[int]string{1: "1 (init) S 0", 10: "10 (a) S 1", 11: "11 (b) S 10", 12: "12 (c) S 1"} {
		d := filepath.Join(root, strconv.Itoa(pid))
		os.Mkdir(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !IsAncestor(root, 10, 11) || IsAncestor(root, 10, 12) || IsAncestor(root, 11, 10) || IsAncestor(root, 10, 99) {
		t.Error("ancestry wrong on the fake /proc")
	}
}
