package launchertest

import (
	"bytes"
	"fmt"
	"os"
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
	return Proc{PID: pid, PPID: s.PPID, Comm: s.Comm, State: string(s.State), Start: strconv.FormatUint(s.StartTime, 10)}, true
}

// AllProcs lists every process, zombies included.
func AllProcs() []Proc {
	ents, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if q, ok := ReadProc(pid); ok {
			out = append(out, q)
		}
	}
	return out
}

// DescendantsOf follows ppid chains from root; zombies are left out.
func DescendantsOf(root int) []Proc {
	children := map[int][]Proc{}
	for _, q := range AllProcs() {
		children[q.PPID] = append(children[q.PPID], q)
	}
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if c.State != "Z" {
				out = append(out, c)
			}
			queue = append(queue, c.PID)
		}
	}
	return out
}

// Alive: the process exists and is not a zombie.
func Alive(pid int) bool {
	q, ok := ReadProc(pid)
	return ok && q.State != "Z"
}

// ProcessesUnder lists live processes (daemons, QEMU, launcher, monitor of
// one pod) whose command line names dir itself or a path inside it: dir
// followed by "/" or ending an argument, so /tmp/vl12 does not match
// /tmp/vl123/...
func ProcessesUnder(dir string) []int {
	var pids []int
	inside, whole := []byte(dir+"/"), []byte(dir+"\x00")
	for _, q := range AllProcs() {
		if q.PID == os.Getpid() || q.State == "Z" {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", q.PID))
		if err == nil && (bytes.Contains(cmdline, inside) || bytes.Contains(cmdline, whole)) {
			pids = append(pids, q.PID)
		}
	}
	return pids
}
