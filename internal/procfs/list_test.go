package procfs

import (
	"os"
	"slices"
	"testing"
)

// TestDescendants: children and grandchildren of root are found, root,
// its ancestors and unrelated processes are not, and a parent loop ends.
func TestDescendants(t *testing.T) {
	st := func(pid, ppid int) Stat { return Stat{PID: pid, PPID: ppid} }
	for _, c := range []struct {
		name  string
		procs []Stat
		root  int
		want  []int
	}{
		{"tree", []Stat{st(1, 0), st(10, 1), st(11, 10), st(12, 11), st(13, 10), st(20, 1)}, 10, []int{11, 12, 13}},
		{"leaf", []Stat{st(1, 0), st(10, 1)}, 10, nil},
		{"absent root", []Stat{st(1, 0), st(10, 1)}, 99, nil},
		{"loop below root", []Stat{st(10, 1), st(11, 10), st(12, 13), st(13, 12), st(14, 11)}, 10, []int{11, 14}},
		{"loop through root", []Stat{st(10, 11), st(11, 10)}, 10, []int{11}},
		{"self parent", []Stat{st(10, 1), st(11, 11), st(12, 10)}, 10, []int{12}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []int
			for _, s := range Descendants(c.procs, c.root) {
				got = append(got, s.PID)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("Descendants(%d) = %v, want %v", c.root, got, c.want)
			}
		})
	}
}

// TestListAndCmdline: this process is in List with its parent, and its
// command line is the one it was started with.
func TestListAndCmdline(t *testing.T) {
	all, err := List("/proc")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(s Stat) bool { return s.PID == os.Getpid() })
	if i < 0 {
		t.Fatalf("this process (%d) not in List's %d processes", os.Getpid(), len(all))
	}
	if all[i].PPID != os.Getppid() {
		t.Errorf("ppid %d, want %d", all[i].PPID, os.Getppid())
	}
	args, err := Cmdline("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(args, os.Args) {
		t.Errorf("Cmdline = %q, want %q", args, os.Args)
	}
	if _, err := Cmdline("/proc", 1<<30); err == nil {
		t.Error("Cmdline of a pid that cannot exist: no error")
	}
}
