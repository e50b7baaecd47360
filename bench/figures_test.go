package main

import (
	"os"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name               string
		samples            []float64
		median, p95        float64
		min, max           float64
		limit              float64
		on                 string
		wantMet, hasTarget bool
	}{
		{name: "odd", samples: []float64{5, 1, 3}, median: 3, p95: 5, min: 1, max: 5},
		{name: "even", samples: []float64{4, 1, 3, 2}, median: 2.5, p95: 4, min: 1, max: 4},
		{name: "one", samples: []float64{7}, median: 7, p95: 7, min: 7, max: 7},
		// Nearest rank: the 95th percentile of 20 samples is the 19th.
		{name: "twenty", samples: seq(20), median: 10.5, p95: 19, min: 1, max: 20},
		{name: "median under target", samples: []float64{1, 2, 9}, median: 2, p95: 9, min: 1, max: 9,
			limit: 5, hasTarget: true, wantMet: true},
		{name: "p95 over target", samples: []float64{1, 2, 9}, median: 2, p95: 9, min: 1, max: 9,
			limit: 5, on: "p95", hasTarget: true, wantMet: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Figure{Samples: tt.samples, On: tt.on}
			if tt.hasTarget {
				f.limit = &tt.limit
			}
			f.summarize()
			if f.N != len(tt.samples) || f.Median != tt.median || f.P95 != tt.p95 || f.Min != tt.min || f.Max != tt.max {
				t.Errorf("got n=%d median=%v p95=%v min=%v max=%v, want median=%v p95=%v min=%v max=%v",
					f.N, f.Median, f.P95, f.Min, f.Max, tt.median, tt.p95, tt.min, tt.max)
			}
			if (f.Met != nil) != tt.hasTarget {
				t.Fatalf("Met set = %v, want %v", f.Met != nil, tt.hasTarget)
			}
			if f.Met != nil && *f.Met != tt.wantMet {
				t.Errorf("Met = %v, want %v", *f.Met, tt.wantMet)
			}
		})
	}
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(n - i) // descending: summarize must sort
	}
	return out
}

func TestCatalogKeysUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range catalogList {
		if seen[s.key] {
			t.Errorf("duplicate catalog key %q", s.key)
		}
		seen[s.key] = true
		if s.target != "" && s.limit == 0 {
			t.Errorf("%s: target %q without a numeric limit", s.key, s.target)
		}
	}
}

// The memory readers on this very process: its RSS is not zero and its own
// executable is among its largest mappings.
func TestReadMemSelf(t *testing.T) {
	pid := os.Getpid()
	m, err := readMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.PSS <= 0 || m.Anon <= 0 || m.PSS > m.RSS {
		t.Errorf("implausible smaps_rollup of self: %+v", m)
	}
	maps, err := topMappings(pid, 50)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mp := range maps {
		if strings.HasSuffix(exe, mp.Name) || mp.Name == exe {
			found = mp.RSSKiB > 0
		}
	}
	if !found {
		t.Errorf("own executable %s not among the mappings %+v", exe, maps)
	}
}

func TestRoleOf(t *testing.T) {
	for argv0, want := range map[string]string{
		"virt-launcher-monitor": roleMonitor, "virt-launcher": roleLauncher,
		"libvirtd": roleDaemon, "virtqemud": roleDaemon, "virtlogd": roleVirtlogd,
		"qemu-system-x86_64": roleQEMU, "virsh": "",
	} {
		if got := roleOf(proc{argv0: argv0}); got != want {
			t.Errorf("roleOf(%q) = %q, want %q", argv0, got, want)
		}
	}
}

func TestCheckStats(t *testing.T) {
	full := `{"Cpu":{"TimeSet":true},"Vcpu":[{"TimeSet":true},{"StateSet":true}],"Block":[{"Alias":"root"}],"CPUMapSet":true}`
	if err := checkStats(full); err != nil {
		t.Errorf("complete stats refused: %v", err)
	}
	for name, s := range map[string]string{
		"no cpu":      `{"Vcpu":[{"TimeSet":true}],"Block":[{"Alias":"root"}],"CPUMapSet":true}`,
		"no alias":    `{"Cpu":{"TimeSet":true},"Vcpu":[{"TimeSet":true}],"Block":[{"Alias":""}],"CPUMapSet":true}`,
		"no cpu map":  `{"Cpu":{"TimeSet":true},"Vcpu":[{"TimeSet":true}],"Block":[{"Alias":"root"}]}`,
		"no vcpus":    `{"Cpu":{"TimeSet":true},"Vcpu":[],"Block":[{"Alias":"root"}],"CPUMapSet":true}`,
		"not JSON":    `{`,
		"empty reply": ``,
	} {
		if err := checkStats(s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPrintPairs: both medians, their ratio (ours over KubeVirt's) and the
// verdict against the ratio target; the pair figures stay out of the main
// table but keep their samples.
func TestPrintPairs(t *testing.T) {
	r := newResults()
	for _, v := range []float64{100, 300, 200} {
		r.add("pair.virtlauncher.first_sync", v)
	}
	for _, v := range []float64{1000, 1000} {
		r.add("pair.kubevirt.first_sync", v)
	}
	r.add("pair.virtlauncher.helpers_rss", 40)
	r.add("pair.kubevirt.helpers_rss", 100)
	var out, main strings.Builder
	printPairs(&out, r)
	r.print(&main)
	got := out.String()
	for _, want := range []string{
		"first Sync (RPC)", "200", "1000", "0.20", "<= 0.4x  met",
		"helpers RSS", "0.40", "<= 0.25x  MISSED",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("side-by-side table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(main.String(), "first Sync (RPC)") {
		t.Errorf("the main table shows pair figures:\n%s", main.String())
	}
	if f := r.figs["pair.kubevirt.first_sync"]; f.Group != "side by side: kubevirt" || len(f.Samples) != 2 {
		t.Errorf("pair figure %+v", f)
	}
}

// TestPrintPairsDensity: the density figures get a table of their own, the
// bound on ours' PSS per VMI is judged on ours alone, and a figure
// only one launcher has shows "-" for the other.
func TestPrintPairsDensity(t *testing.T) {
	r := newResults()
	r.add("pair.virtlauncher.density_pss_per_vmi", 12.5)
	r.add("pair.kubevirt.density_pss_per_vmi", 50)
	r.add("pair.virtlauncher.density_booted", 10)
	r.add("pair.virtlauncher.repeat_sync", 2)
	var out strings.Builder
	printPairs(&out, r)
	got := out.String()
	pairAt := strings.Index(got, "[side by side: same image root")
	densAt := strings.Index(got, "[side by side at density")
	if pairAt < 0 || densAt < pairAt {
		t.Fatalf("want the pair table, then the density table:\n%s", got)
	}
	for _, want := range []string{
		"helper PSS per VMI", "12.50", "50.00", "0.25", "ours <= 10  MISSED",
		"guests booted", " 10 ",
	} {
		if !strings.Contains(got[densAt:], want) {
			t.Errorf("density table lacks %q:\n%s", want, got)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "guests booted") && !strings.Contains(l, " - ") {
			t.Errorf("KubeVirt's missing count not shown as -: %q", l)
		}
	}
}
