// Package hostcpu reads the host CPUs a process may run on and how they
// sit in the host: the CPU set of the process's own cgroup (what a
// Kubernetes CPU manager gives a pod with dedicated CPUs, and what KubeVirt's
// launcher reads at start) and the host's NUMA cells with their cores'
// hyper-thread siblings (what virt-handler reports from libvirt's
// capabilities). Both feed the converter's dedicated CPU placement.
package hostcpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// maxCPUs bounds how many CPUs a list may expand to: a file or flag that
// names a huge range must not make us allocate without end (KubeVirt's
// limit is the same).
const maxCPUs = 50000

// ParseList reads the kernel's CPU list format ("0-3,8,10-11"); the
// result keeps the list's order. An empty string is an empty list.
func ParseList(s string) ([]uint, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []uint
	seen := map[uint]bool{}
	for _, item := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(item), "-")
		first, err := strconv.ParseUint(lo, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CPU number or range", item)
		}
		last := first
		if isRange {
			if last, err = strconv.ParseUint(hi, 10, 32); err != nil || last < first {
				return nil, fmt.Errorf("%q is not a CPU range", item)
			}
		}
		if uint64(len(out))+last-first+1 > maxCPUs {
			return nil, fmt.Errorf("more than %d CPUs", maxCPUs)
		}
		for c := first; c <= last; c++ {
			if seen[uint(c)] {
				return nil, fmt.Errorf("CPU %d is listed twice", c)
			}
			seen[uint(c)] = true
			out = append(out, uint(c))
		}
	}
	return out, nil
}

// FormatList writes cpus in the kernel's list format, ranges folded.
func FormatList(cpus []uint) string {
	s := slices.Clone(cpus)
	slices.Sort(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(s[i]), 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatUint(uint64(s[j]), 10))
		}
		i = j + 1
	}
	return b.String()
}

// Sys is the machine's /proc and /sys below Root ("/" on a real machine;
// tests lay a tree out elsewhere).
type Sys struct{ Root string }

func (s Sys) path(p ...string) string {
	return filepath.Join(append([]string{s.Root}, p...)...)
}

// OwnCPUSet is the CPU set of the cgroup process pid ("self" for this
// process) is in: cpuset.cpus.effective of its cgroup v2 group, else, on a
// machine with the v1 cpuset hierarchy, cpuset.cpus of its cpuset group.
// KubeVirt's launcher reads the same file at the root of /sys/fs/cgroup,
// which in a pod's cgroup namespace is the pod's own group; reading the
// group /proc/PID/cgroup names gives the same answer there and the right
// one for a process outside such a namespace (vlctl run, tests). A group
// without the file (no cpuset controller enabled at that level, or a path
// not visible from this mount) takes its nearest ancestor's, as the kernel
// does.
func (s Sys) OwnCPUSet(pid string) ([]uint, string, error) {
	groups, err := s.cgroups(pid)
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Stat(s.path("sys/fs/cgroup/cgroup.controllers")); err == nil {
		if g, ok := groups[""]; ok {
			return s.readUp(s.path("sys/fs/cgroup"), g, "cpuset.cpus.effective")
		}
	}
	if g, ok := groups["cpuset"]; ok {
		return s.readUp(s.path("sys/fs/cgroup/cpuset"), g, "cpuset.cpus")
	}
	return nil, "", fmt.Errorf("/proc/%s/cgroup names no cgroup v2 group on a unified /sys/fs/cgroup and no v1 cpuset group", pid)
}

// cgroups maps each hierarchy's controllers ("" for v2, "cpuset" for
// the v1 cpuset hierarchy, whatever else it is mounted with) to the group.
func (s Sys) cgroups(pid string) (map[string]string, error) {
	b, err := os.ReadFile(s.path("proc", pid, "cgroup"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			out[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			out[c] = f[2]
		}
	}
	return out, sc.Err()
}

// readUp reads file in group below mount, or in the nearest ancestor
// that has it.
func (s Sys) readUp(mount, group, file string) ([]uint, string, error) {
	g := filepath.Clean("/" + group)
	for {
		p := filepath.Join(mount, g, file)
		b, err := os.ReadFile(p)
		if err == nil {
			cpus, err := ParseList(string(b))
			if err != nil {
				return nil, p, fmt.Errorf("%s: %w", p, err)
			}
			return cpus, p, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, p, err
		}
		if g == "/" {
			return nil, p, err
		}
		g = filepath.Dir(g)
	}
}

// NUMA is the host's NUMA cells, each with its CPUs and their hyper-thread
// siblings, from /sys/devices/system (what libvirt's capabilities report
// and virt-handler sends as the host topology). A kernel without NUMA
// nodes gives one cell 0 of every online CPU.
func (s Sys) NUMA() ([]facts.NUMACell, error) {
	nodes, err := filepath.Glob(s.path("sys/devices/system/node/node[0-9]*"))
	if err != nil {
		return nil, err
	}
	type node struct {
		id   uint
		list string
	}
	var found []node
	for _, n := range nodes {
		id, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(n), "node"), 10, 32)
		if err != nil {
			continue
		}
		found = append(found, node{uint(id), filepath.Join(n, "cpulist")})
	}
	if len(found) == 0 {
		found = []node{{0, s.path("sys/devices/system/cpu/online")}}
	}
	slices.SortFunc(found, func(a, b node) int { return int(a.id) - int(b.id) })
	var cells []facts.NUMACell
	for _, n := range found {
		b, err := os.ReadFile(n.list)
		if err != nil {
			return nil, err
		}
		ids, err := ParseList(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.list, err)
		}
		cell := facts.NUMACell{ID: n.id}
		for _, id := range ids {
			sib, err := s.siblings(id)
			if err != nil {
				return nil, err
			}
			cell.CPUs = append(cell.CPUs, facts.HostCPU{ID: id, Siblings: sib})
		}
		cells = append(cells, cell)
	}
	return cells, nil
}

func (s Sys) siblings(cpu uint) ([]uint, error) {
	p := s.path("sys/devices/system/cpu", "cpu"+strconv.FormatUint(uint64(cpu), 10), "topology/thread_siblings_list")
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no topology directory: a core of its own
	}
	if err != nil {
		return nil, err
	}
	sib, err := ParseList(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return sib, nil
}
