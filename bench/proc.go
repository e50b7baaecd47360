package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// proc is one process as /proc shows it.
type proc struct {
	pid, ppid int
	argv0     string // base name of argv[0]
	cmdline   string // arguments joined by spaces
	start     uint64 // start time in clock ticks (guards against pid reuse)
}

// Roles of the processes of one launcher. Helpers are everything but QEMU.
const (
	roleMonitor  = "monitor"
	roleLauncher = "launcher"
	roleDaemon   = "libvirtd"
	roleVirtlogd = "virtlogd"
	roleQEMU     = "qemu"
)

var helperRoles = []string{roleMonitor, roleLauncher, roleDaemon, roleVirtlogd}

func roleOf(p proc) string {
	switch {
	case p.argv0 == "virt-launcher-monitor":
		return roleMonitor
	case p.argv0 == "virt-launcher":
		return roleLauncher
	case p.argv0 == "libvirtd" || p.argv0 == "virtqemud":
		return roleDaemon
	case p.argv0 == "virtlogd":
		return roleVirtlogd
	case strings.HasPrefix(p.argv0, "qemu-system-"):
		return roleQEMU
	}
	return ""
}

func readProc(pid int) (proc, bool) {
	st, err := procfs.ReadStat("/proc", pid)
	if err != nil || st.State == 'Z' { // a zombie has exited already
		return proc{}, false
	}
	return withCmdline(st), true
}

func withCmdline(st procfs.Stat) proc {
	args, _ := procfs.Cmdline("/proc", st.PID)
	p := proc{pid: st.PID, ppid: st.PPID, start: st.StartTime, cmdline: strings.Join(args, " ")}
	if len(args) > 0 {
		p.argv0 = filepath.Base(args[0])
	}
	return p
}

// procsUnder returns the live processes of one bench launcher's directory
// (procfs.Under): the monitor and launcher through their directory flags,
// the daemons through their config files, QEMU through its disks.
func procsUnder(dir string) []proc {
	ps, _ := procfs.Under("/proc", dir)
	out := make([]proc, 0, len(ps))
	for _, st := range ps {
		out = append(out, withCmdline(st))
	}
	return out
}

// alive reports whether p still runs (and is the same process).
func alive(p proc) bool {
	q, ok := readProc(p.pid)
	return ok && q.start == p.start
}

// killUnder ends every process of dir: SIGTERM, then SIGKILL after wait.
// It is the last resort of cleanup; the normal end is the launcher's own.
func killUnder(dir string, wait time.Duration) {
	if err := pod.EndProcesses(context.Background(), pod.Under(dir), pod.EndOptions{Signal: syscall.SIGTERM, Grace: wait}); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", dir, err)
	}
}

// memUse is one process's memory from /proc/<pid>/smaps_rollup, in KiB.
type memUse struct {
	RSS, PSS, Anon, PSSAnon, PSSFile int64
}

func (m *memUse) add(o memUse) {
	m.RSS += o.RSS
	m.PSS += o.PSS
	m.Anon += o.Anon
	m.PSSAnon += o.PSSAnon
	m.PSSFile += o.PSSFile
}

func readMem(pid int) (memUse, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memUse{}, err
	}
	defer f.Close()
	var m memUse
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "Rss":
			m.RSS = n
		case "Pss":
			m.PSS = n
		case "Anonymous":
			m.Anon = n
		case "Pss_Anon":
			m.PSSAnon = n
		case "Pss_File":
			m.PSSFile = n
		}
	}
	return m, sc.Err()
}

// sampleMem reads the memory of the processes ps, summed per role.
// Unknown processes (a virsh someone runs, say) are left out.
func sampleMem(ps []proc) (map[string]memUse, map[string]int, error) {
	use := map[string]memUse{}
	count := map[string]int{}
	for _, p := range ps {
		r := roleOf(p)
		if r == "" {
			continue
		}
		m, err := readMem(p.pid)
		if err != nil {
			continue // exited meanwhile
		}
		u := use[r]
		u.add(m)
		use[r] = u
		count[r]++
	}
	for _, r := range helperRoles {
		// virtlogd runs only with the launcher's --virtlogd: by default QEMU
		// writes its logs itself, which saves a whole libvirt process
		// (about 17 MiB RSS) per pod.
		if count[r] == 0 && r != roleVirtlogd {
			return use, count, fmt.Errorf("no %s process among the launcher's %d", r, len(ps))
		}
	}
	return use, count, nil
}

// mapping is the memory of one kind of mapping of a process: a file (the
// binary, a shared library), or [heap], [stack], [anon].
type mapping struct {
	Name   string `json:"name"`
	RSSKiB int64  `json:"rssKiB"`
	PSSKiB int64  `json:"pssKiB"`
}

// topMappings reads /proc/<pid>/smaps and returns the n largest mappings
// by RSS, summed by name: where a process's memory goes.
func topMappings(pid, n int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sum := map[string]*mapping{}
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		// A mapping header starts with "start-end perms".
		if strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			name := "[anon]"
			if len(fs) >= 6 {
				name = strings.Join(fs[5:], " ")
			}
			if sum[name] == nil {
				sum[name] = &mapping{Name: name}
			}
			cur = sum[name]
			continue
		}
		if cur == nil || len(fs) < 2 {
			continue
		}
		v, err := strconv.ParseInt(fs[1], 10, 64)
		if err != nil {
			continue
		}
		switch fs[0] {
		case "Rss:":
			cur.RSSKiB += v
		case "Pss:":
			cur.PSSKiB += v
		}
	}
	out := make([]mapping, 0, len(sum))
	for _, m := range sum {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RSSKiB > out[j].RSSKiB })
	if len(out) > n {
		out = out[:n]
	}
	return out, sc.Err()
}

// profileOf returns the largest mappings of each helper among ps.
func profileOf(ps []proc) map[string][]mapping {
	out := map[string][]mapping{}
	for _, p := range ps {
		r := roleOf(p)
		if r == "" {
			continue
		}
		if m, err := topMappings(p.pid, 8); err == nil {
			out[r] = m
		}
	}
	return out
}
