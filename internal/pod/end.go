package pod

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// Selector lists the living processes of a pod (zombies are dead
// already and left out). Every pod of this machine is found by something
// no other process has: its processes' user id, its directory, or its
// monitor's process tree.
type Selector func() []int

// Holding selects the processes that hold id as a user or group id: a VM
// of vlctl run, whose id nothing else on the machine runs as.
func Holding(id uint32) Selector {
	return func() []int {
		pids, _ := procfs.Holding("/proc", id)
		return pids
	}
}

// Under selects the processes of the pod directory dir (procfs.Under): a
// pod whose processes share their user with other pods'.
func Under(dir string) Selector {
	return func() []int {
		ps, _ := procfs.Under("/proc", dir)
		pids := make([]int, 0, len(ps))
		for _, p := range ps {
			pids = append(pids, p.PID)
		}
		return pids
	}
}

// Below selects the processes below pid, by /proc's parent links: the
// launcher and the daemons run in process groups of their own and QEMU is
// the daemon's child, so the monitor's process group does not hold them.
func Below(pid int) Selector {
	return func() []int {
		all, _ := procfs.List("/proc")
		var out []int
		for _, p := range procfs.Descendants(all, pid) {
			if p.State != 'Z' {
				out = append(out, p.PID)
			}
		}
		return out
	}
}

// EndOptions says how EndProcesses ends a pod's processes.
type EndOptions struct {
	// Signal is sent to them first (0: none; they are ending by
	// themselves, as a launcher that shuts its guest down does).
	Signal syscall.Signal
	// Grace is how long they get to end before SIGKILL.
	Grace time.Duration
	// Force, once closed, cuts the grace short (a second Ctrl-C).
	Force <-chan struct{}
	// Killing, if set, hears which processes are left for SIGKILL, once,
	// before the first.
	Killing func(left []int)
}

// killRounds bounds the SIGKILL rounds; each lists the processes again,
// for children forked meanwhile.
const (
	killRounds = 50
	killPause  = 50 * time.Millisecond
)

// EndProcesses ends the processes sel finds: o.Signal, then up to o.Grace
// for them to go, then SIGKILL, again until none is left. It returns an
// error naming the survivors. A pid is signalled only through a pidfd
// opened before a second listing that still finds it, so a pid reused by
// another process since the first listing is never signalled.
func EndProcesses(ctx context.Context, sel Selector, o EndOptions) error {
	if len(sel()) == 0 {
		return nil
	}
	if o.Signal != 0 {
		signal(sel, o.Signal)
	}
	if o.Grace > 0 {
		grace := time.NewTimer(o.Grace)
		defer grace.Stop()
	wait:
		for len(sel()) > 0 {
			select {
			case <-grace.C:
				break wait
			case <-o.Force:
				break wait
			case <-ctx.Done():
				break wait
			case <-time.After(killPause):
			}
		}
	}
	left := sel()
	if len(left) == 0 {
		return nil
	}
	if o.Killing != nil {
		o.Killing(left)
	}
	for range killRounds {
		if signal(sel, syscall.SIGKILL) == 0 {
			return nil
		}
		time.Sleep(killPause)
	}
	if left := sel(); len(left) > 0 {
		return fmt.Errorf("processes %v survive SIGKILL", left)
	}
	return nil
}

// signal sends sig to what sel finds, as EndProcesses says, and returns
// how many it found.
func signal(sel Selector, sig syscall.Signal) int {
	pids := sel()
	procs := make(map[int]*os.Process, len(pids))
	for _, pid := range pids {
		// On Linux os.FindProcess opens a pidfd: it pins the process.
		if p, err := os.FindProcess(pid); err == nil {
			procs[pid] = p
		}
	}
	again := sel()
	for pid, p := range procs {
		if slices.Contains(again, pid) {
			p.Signal(sig)
		}
		p.Release()
	}
	return len(pids)
}
