package launchertest

import (
	"fmt"
	"strconv"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// Proc is one /proc entry.
type Proc struct {
	PID, PPID int
	Comm      string
	State     string
	Start     string // start time in clock ticks: tells pid reuse apart
}

func (q Proc) String() string { return fmt.Sprintf("%d(%s)", q.PID, q.Comm) }

// ReadProc reads /proc/pid/stat; false when the process is gone.
func ReadProc(pid int) (Proc, bool) {
	s, err := procfs.ReadStat("/proc", pid)
	if err != nil {
		return Proc{}, false
	}
	return fromStat(s), true
}

// AllProcs lists every process, zombies included.
func AllProcs() []Proc {
	all, _ := procfs.List("/proc")
	return fromStats(all)
}

// DescendantsOf follows ppid chains from root; zombies are left out.
func DescendantsOf(root int) []Proc {
	all, _ := procfs.List("/proc")
	var out []Proc
	for _, q := range fromStats(procfs.Descendants(all, root)) {
		if q.State != "Z" {
			out = append(out, q)
		}
	}
	return out
}

func fromStats(ss []procfs.Stat) []Proc {
	out := make([]Proc, 0, len(ss))
	for _, s := range ss {
		out = append(out, fromStat(s))
	}
	return out
}

func fromStat(s procfs.Stat) Proc {
	return Proc{PID: s.PID, PPID: s.PPID, Comm: s.Comm, State: string(s.State), Start: strconv.FormatUint(s.StartTime, 10)}
}

// Alive: the process exists and is not a zombie.
func Alive(pid int) bool {
	q, ok := ReadProc(pid)
	return ok && q.State != "Z"
}
