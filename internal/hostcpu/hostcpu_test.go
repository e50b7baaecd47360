package hostcpu

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint
		err  string
	}{
		{in: "", want: nil},
		{in: "1\n", want: []uint{1}},
		{in: "0-2,8,10-11", want: []uint{0, 1, 2, 8, 10, 11}},
		{in: "3,1", want: []uint{3, 1}},
		{in: "1-0", err: `"1-0" is not a CPU range`},
		{in: "a", err: `"a" is not a CPU number`},
		{in: "1,1", err: "CPU 1 is listed twice"},
		{in: "0-4000000", err: "more than 50000 CPUs"},
	} {
		got, err := ParseList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseList(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseList(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
	if got := FormatList([]uint{5, 0, 1, 2, 7, 8}); got != "0-2,5,7-8" {
		t.Errorf("FormatList = %q", got)
	}
}

// tree writes files (path: content) below a new root.
func tree(t *testing.T, files map[string]string) Sys {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		f := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Sys{Root: root}
}

func TestOwnCPUSet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    map[string]string
		want     []uint
		wantFile string
		err      string
	}{
		{name: "v2: the group's effective set", files: map[string]string{
			"proc/self/cgroup":                                     "0::/kubepods/pod1/c1\n",
			"sys/fs/cgroup/cgroup.controllers":                     "cpuset cpu memory",
			"sys/fs/cgroup/cpuset.cpus.effective":                  "0-7",
			"sys/fs/cgroup/kubepods/pod1/c1/cpuset.cpus.effective": "2-3",
		}, want: []uint{2, 3}, wantFile: "sys/fs/cgroup/kubepods/pod1/c1/cpuset.cpus.effective"},
		{name: "v2 in a cgroup namespace: the root is the pod's", files: map[string]string{
			"proc/self/cgroup":                    "0::/\n",
			"sys/fs/cgroup/cgroup.controllers":    "cpuset",
			"sys/fs/cgroup/cpuset.cpus.effective": "5",
		}, want: []uint{5}, wantFile: "sys/fs/cgroup/cpuset.cpus.effective"},
		{name: "v2: cpuset not enabled below, the nearest ancestor's", files: map[string]string{
			"proc/self/cgroup":                      "0::/a/b/c\n",
			"sys/fs/cgroup/cgroup.controllers":      "cpuset",
			"sys/fs/cgroup/a/cpuset.cpus.effective": "1",
			"sys/fs/cgroup/a/b/c/cgroup.procs":      "",
			"sys/fs/cgroup/cpuset.cpus.effective":   "0-1",
		}, want: []uint{1}, wantFile: "sys/fs/cgroup/a/cpuset.cpus.effective"},
		{name: "v1 cpuset hierarchy (hybrid machine)", files: map[string]string{
			"proc/self/cgroup":                        "4:memory:/x\n3:cpuset:/vltest\n0::/\n",
			"sys/fs/cgroup/cpuset/cpuset.cpus":        "0-1",
			"sys/fs/cgroup/cpuset/vltest/cpuset.cpus": "1",
		}, want: []uint{1}, wantFile: "sys/fs/cgroup/cpuset/vltest/cpuset.cpus"},
		{name: "v1, the group not visible in this mount: the mount's root", files: map[string]string{
			"proc/self/cgroup":                 "3:cpuset,cpu:/docker/abc\n",
			"sys/fs/cgroup/cpuset/cpuset.cpus": "4-5",
		}, want: []uint{4, 5}, wantFile: "sys/fs/cgroup/cpuset/cpuset.cpus"},
		{name: "no cpuset anywhere", files: map[string]string{"proc/self/cgroup": "4:memory:/x\n"},
			err: "names no cgroup v2 group on a unified /sys/fs/cgroup and no v1 cpuset group"},
		{name: "a garbled file", files: map[string]string{
			"proc/self/cgroup":                    "0::/\n",
			"sys/fs/cgroup/cgroup.controllers":    "cpuset",
			"sys/fs/cgroup/cpuset.cpus.effective": "x",
		}, err: `cpuset.cpus.effective: "x" is not a CPU number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tree(t, tc.files)
			got, file, err := s.OwnCPUSet("self")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) || file != filepath.Join(s.Root, tc.wantFile) {
				t.Fatalf("= %v from %s, %v; want %v from %s", got, file, err, tc.want, tc.wantFile)
			}
		})
	}
}

func TestNUMA(t *testing.T) {
	s := tree(t, map[string]string{
		"sys/devices/system/node/node1/cpulist":                     "1,3",
		"sys/devices/system/node/node0/cpulist":                     "0,2",
		"sys/devices/system/node/possible":                          "0-1",
		"sys/devices/system/cpu/cpu0/topology/thread_siblings_list": "0,2",
		"sys/devices/system/cpu/cpu2/topology/thread_siblings_list": "0,2",
		"sys/devices/system/cpu/cpu1/topology/thread_siblings_list": "1",
	})
	got, err := s.NUMA()
	want := []facts.NUMACell{
		{ID: 0, CPUs: []facts.HostCPU{{ID: 0, Siblings: []uint{0, 2}}, {ID: 2, Siblings: []uint{0, 2}}}},
		{ID: 1, CPUs: []facts.HostCPU{{ID: 1, Siblings: []uint{1}}, {ID: 3}}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("NUMA() = %+v, %v; want %+v", got, err, want)
	}
	flat := tree(t, map[string]string{"sys/devices/system/cpu/online": "0-1"})
	got, err = flat.NUMA()
	if err != nil || len(got) != 1 || len(got[0].CPUs) != 2 {
		t.Fatalf("without NUMA nodes: %+v, %v; want cell 0 of CPUs 0-1", got, err)
	}
}

// TestThisMachine reads the real files: this process's CPU set must be
// CPUs it may run on, and the topology must hold them.
func TestThisMachine(t *testing.T) {
	cpus, file, err := Sys{Root: "/"}.OwnCPUSet("self")
	if err != nil || len(cpus) == 0 {
		t.Fatalf("own CPU set: %v from %s, %v", cpus, file, err)
	}
	cells, err := Sys{Root: "/"}.NUMA()
	if err != nil || len(cells) == 0 {
		t.Fatalf("NUMA: %v, %v", cells, err)
	}
	known := map[uint]bool{}
	for _, c := range cells {
		for _, cpu := range c.CPUs {
			known[cpu.ID] = true
		}
	}
	for _, c := range cpus {
		if !known[c] {
			t.Errorf("CPU %d of %s is in no NUMA cell %+v", c, file, cells)
		}
	}
	t.Logf("CPU set %s from %s; %d NUMA cell(s)", FormatList(cpus), file, len(cells))
}
