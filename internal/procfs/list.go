package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// List reads every process of procRoot, zombies included. Processes that
// end while it reads are left out.
func List(procRoot string) ([]Stat, error) {
	names, err := pids(procRoot)
	if err != nil {
		return nil, err
	}
	out := make([]Stat, 0, len(names))
	for _, pid := range names {
		if s, err := ReadStat(procRoot, pid); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// pids lists the numeric entries of procRoot.
func pids(procRoot string) ([]int, error) {
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Descendants picks from procs (one List) those below root on their parent
// chains, root itself left out, zombies included: callers that signal
// leave zombies out themselves. A parent chain that loops (/proc changed
// while it was read) is cut where it comes back.
func Descendants(procs []Stat, root int) []Stat {
	children := make(map[int][]Stat, len(procs))
	for _, p := range procs {
		if p.PID != p.PPID {
			children[p.PPID] = append(children[p.PPID], p)
		}
	}
	var out []Stat
	seen := map[int]bool{root: true}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.PID] {
				continue
			}
			seen[c.PID] = true
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Cmdline reads pid's arguments (argv[0] first); none for a kernel thread
// or a zombie.
func Cmdline(procRoot string, pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, err
	}
	s := strings.TrimRight(string(b), "\x00")
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "\x00"), nil
}
