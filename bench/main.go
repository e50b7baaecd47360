// Command bench is virtlauncher's benchmark suite: it boots the
// test guest through the real monitor, launcher, private libvirt daemon and
// QEMU, the way virt-handler drives a launcher, and measures the helpers'
// fixed memory, the time to ready and to a running guest (with the libvirt
// capability cache cold and warm), the same domain through plain virsh as
// the limit, the lifecycle verbs, ten VMIs at once, the guest agent
// poller's cost, and the translator; and KubeVirt's own launcher beside
// ours in pods of the same image (start, stats, volume hotplug, memory,
// and ten VMIs of each at once).
// It prints a table and writes every figure (median and p95 over repeated
// runs, with the samples) to a JSON file. It never fails on a timing.
//
// Run it as root from the repository root after `make build`:
//
//	go run ./bench [-quick] [-runs N] [-only runs,density,agent,migration,restart,translator]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/repo"
)

// env is what every measurement shares.
type env struct {
	binDir   string
	workRoot string
	owner    ids
	keep     bool
	verbose  bool
	start    time.Time
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
}

type options struct {
	quick     bool
	runs      int
	only      string
	settle    time.Duration
	density   int
	out       string
	corpus    string
	benchRuns int
	// agentPairs runs with and without the guest agent; agentWindow is
	// how long their CPU time is measured.
	agentPairs  int
	agentWindow time.Duration
	// kubevirt runs the side-by-side part; imageDir holds the launcher
	// image's root file system and binaries (make image), kubevirtBin
	// KubeVirt's launcher and monitor (make kubevirt-launcher).
	kubevirt    bool
	imageDir    string
	kubevirtBin string
	// hotplugs is how many volume plug/unplug cycles each pair run does.
	hotplugs int
	// restarts is how many times the restart part kills the launcher.
	restarts int
}

func main() {
	testing.Init() // testing.Benchmark needs the testing flags registered
	var o options
	e := &env{start: time.Now()}
	var user string
	flag.BoolVar(&o.quick, "quick", false, "a short run for development: 2 runs per cache mode, 5 s settle, 3 VMIs for density, output to bench/out/")
	flag.IntVar(&o.runs, "runs", 5, "launcher runs per cache mode (cold and warm)")
	flag.StringVar(&o.only, "only", "", "run only these parts, comma-separated: runs, pair, density, agent, migration, restart, translator")
	flag.IntVar(&o.agentPairs, "agent-pairs", 2, "pairs of runs with and without the guest agent, for the poller's cost")
	flag.DurationVar(&o.agentWindow, "agent-window", time.Minute, "how long the CPU time of a run with or without the guest agent is measured")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "steady state after the guest booted before the memory sample")
	flag.IntVar(&o.density, "density", 10, "VMIs started at once for the density figures")
	flag.BoolVar(&o.kubevirt, "kubevirt", true, "run KubeVirt's own launcher beside ours, both in pods of the launcher image's root file system: the pair part, and the pod sets of the density part; false where KubeVirt's launcher cannot be built")
	flag.IntVar(&o.restarts, "restarts", 20, "launcher SIGKILLs (each restarted by the monitor) in the restart part")
	flag.IntVar(&o.hotplugs, "hotplugs", 3, "volume hotplug and unplug cycles per pair run (0: none)")
	flag.StringVar(&o.imageDir, "image", "bin/image", "the launcher image's build directory: rootfs.tar and bin/ (make image)")
	flag.StringVar(&o.kubevirtBin, "kubevirt-bin", "bin/kubevirt", "KubeVirt's virt-launcher and virt-launcher-monitor (make kubevirt-launcher)")
	flag.StringVar(&o.out, "out", "bench/results.json", "where to write the results")
	flag.StringVar(&o.corpus, "corpus", "", "the translator's input (default: vmi-fedora.yaml of the example corpus beside the checkout, or in $VL_CORPUS)")
	flag.IntVar(&o.benchRuns, "translator-runs", 5, "testing.Benchmark repetitions for the translator")
	flag.StringVar(&e.binDir, "bin", "bin", "directory with virt-launcher-monitor, virt-launcher and vlctl (make build)")
	flag.StringVar(&e.workRoot, "work-root", "/run/vlb", "parent of the runs' work directories (short: unix socket paths are limited to 107 bytes)")
	flag.StringVar(&user, "user", launchertest.TestUser, "the unprivileged user that runs the launchers (vlctl run gives each VM a uid of its own; the bench keeps one account)")
	flag.BoolVar(&e.keep, "keep", false, "keep the work directories for inspection")
	flag.BoolVar(&e.verbose, "v", false, "more progress output")
	flag.Parse()
	if o.quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["runs"] {
			o.runs = 2
		}
		if !set["settle"] {
			o.settle = 5 * time.Second
		}
		if !set["density"] {
			o.density = 3
		}
		if !set["out"] {
			o.out = "bench/out/results.json"
		}
		if !set["translator-runs"] {
			o.benchRuns = 2
		}
		if !set["agent-pairs"] {
			o.agentPairs = 1
		}
		if !set["agent-window"] {
			o.agentWindow = 20 * time.Second
		}
		if !set["hotplugs"] {
			o.hotplugs = 1
		}
		if !set["restarts"] {
			o.restarts = 5
		}
	}
	if err := run(e, o, user); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(e *env, o options, user string) error {
	parts := map[string]bool{"runs": true, "pair": o.kubevirt, "density": true, "agent": true, "migration": true, "restart": true, "translator": true}
	if o.only != "" {
		parts = map[string]bool{}
		for _, p := range strings.Split(o.only, ",") {
			p = strings.TrimSpace(p)
			switch p {
			case "runs", "pair", "density", "agent", "migration", "restart", "translator":
				parts[p] = true
			default:
				return fmt.Errorf("-only: unknown part %q (want runs, pair, density, agent, migration, restart, translator)", p)
			}
		}
	}
	if o.runs < 1 || o.density < 1 || o.benchRuns < 1 || o.agentPairs < 1 || o.agentWindow < time.Second || o.hotplugs < 0 || o.restarts < 1 {
		return errors.New("-runs, -density, -agent-pairs, -restarts and -translator-runs must be at least 1, -agent-window at least 1s, -hotplugs at least 0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	r := newResults()
	rep := report{Time: time.Now().UTC().Format(time.RFC3339), Host: hostInfo(), Config: config{
		Runs: o.runs, SettleSeconds: o.settle.Seconds(), Density: o.density, Quick: o.quick, Only: o.only,
		TranslatorRuns: o.benchRuns, AgentPairs: o.agentPairs, AgentWindowSeconds: o.agentWindow.Seconds(),
		Hotplugs: o.hotplugs, Restarts: o.restarts, KubeVirt: o.kubevirt,
	}}
	var errs []error
	if parts["pair"] && !o.kubevirt {
		return errors.New("-only pair with -kubevirt=false: nothing to compare")
	}
	if parts["runs"] || parts["pair"] || parts["density"] || parts["agent"] || parts["migration"] || parts["restart"] {
		if os.Geteuid() != 0 {
			return errors.New("the launcher parts need root (they start the monitor as the unprivileged user); use -only translator otherwise")
		}
		var err error
		if e.owner, err = lookupUser(user); err != nil {
			return err
		}
		if e.binDir, err = filepath.Abs(e.binDir); err != nil {
			return err
		}
		if err := os.MkdirAll(e.workRoot, 0o755); err != nil {
			return err
		}
		snap, bins, err := snapshotBinaries(e.binDir, e.workRoot)
		if snap != "" && !e.keep {
			defer os.RemoveAll(snap)
		}
		if err != nil {
			return err
		}
		e.binDir = snap
		rep.Binaries = bins
		for _, b := range bins {
			if !b.Static {
				r.note("%s is dynamically linked (make build links statically with CGO_ENABLED=0): its RSS includes libc", b.Name)
			}
		}
		b := &bench{env: e, r: r, o: o}
		defer b.cleanup()
		if parts["runs"] {
			if err := b.runs(ctx); err != nil {
				errs = append(errs, fmt.Errorf("runs: %w", err))
			}
			rep.Cache = b.cache
			rep.Profile = b.profile
		}
		if parts["pair"] && ctx.Err() == nil {
			if err := b.pairs(ctx); err != nil {
				errs = append(errs, fmt.Errorf("pair: %w", err))
			}
		}
		if parts["density"] && ctx.Err() == nil {
			if err := b.densityRun(ctx); err != nil {
				errs = append(errs, fmt.Errorf("density: %w", err))
			}
		}
		if parts["agent"] && ctx.Err() == nil {
			if err := b.agentRun(ctx); err != nil {
				errs = append(errs, fmt.Errorf("agent: %w", err))
			}
		}
		if parts["migration"] && ctx.Err() == nil {
			if err := b.migrationRun(ctx); err != nil {
				errs = append(errs, fmt.Errorf("migration: %w", err))
			}
		}
		if parts["restart"] && ctx.Err() == nil {
			if err := b.restartRun(ctx); err != nil {
				errs = append(errs, fmt.Errorf("restart: %w", err))
			}
		}
	}
	if parts["translator"] && ctx.Err() == nil {
		if err := translatorRun(e, r, o); err != nil {
			errs = append(errs, fmt.Errorf("translator: %w", err))
		}
	}
	for _, err := range errs {
		first, _, _ := strings.Cut(err.Error(), "\nlast launcher log lines")
		r.note("ERROR %s", first)
	}
	fmt.Println()
	fmt.Printf("virtlauncher bench, %s, %d cores, %s\n", rep.Time, rep.Host.Cores, rep.Host.Libvirt)
	r.print(os.Stdout)
	printPairs(os.Stdout, r)
	rep.Figures = r.list()
	rep.Notes = r.notes
	rep.DurationSeconds = time.Since(e.start).Seconds()
	rep.Host.LoadAvgEnd = loadavg()
	fmt.Printf("load average: start %s, end %s\n", rep.Host.LoadAvgStart, rep.Host.LoadAvgEnd)
	if err := writeJSON(o.out, rep); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Printf("results: %s (%.0f s)\n", o.out, rep.DurationSeconds)
	}
	return errors.Join(errs...)
}

type report struct {
	Time            string     `json:"time"`
	DurationSeconds float64    `json:"durationSeconds"`
	Host            host       `json:"host"`
	Binaries        []binary   `json:"binaries,omitempty"`
	Config          config     `json:"config"`
	Cache           *cacheInfo `json:"capabilityCache,omitempty"`
	// Profile is where each process's memory goes: its largest mappings
	// (KiB) at the last run's memory sample.
	Profile map[string][]mapping `json:"memoryProfile,omitempty"`
	Figures []*Figure            `json:"figures"`
	Notes   []string             `json:"notes,omitempty"`
}

type host struct {
	Cores    int    `json:"cores"`
	CPU      string `json:"cpu"`
	MemoryMB int64  `json:"memoryMiB"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Libvirt  string `json:"libvirt"`
	QEMU     string `json:"qemu"`
	KVM      bool   `json:"kvm"`
	// LoadAvg is /proc/loadavg at the start and at the end: the machine is
	// shared, and other work running meanwhile shows in the timings.
	LoadAvgStart string `json:"loadavgStart"`
	LoadAvgEnd   string `json:"loadavgEnd"`
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

type config struct {
	Runs           int     `json:"runsPerCacheMode"`
	SettleSeconds  float64 `json:"settleSeconds"`
	Density        int     `json:"densityVMIs"`
	TranslatorRuns int     `json:"translatorRuns"`
	AgentPairs     int     `json:"agentPairs"`
	// AgentWindowSeconds is how long each agent run's CPU time is measured.
	AgentWindowSeconds float64 `json:"agentWindowSeconds"`
	// Hotplugs is the volume plug/unplug cycles per pair run.
	Hotplugs int `json:"hotplugsPerPairRun"`
	// Restarts is the launcher kills of the restart part.
	Restarts int `json:"launcherRestarts"`
	// KubeVirt says whether KubeVirt's launcher ran (pair, density pods).
	KubeVirt bool   `json:"kubevirt"`
	Quick    bool   `json:"quick"`
	Only     string `json:"only,omitempty"`
}

func hostInfo() host {
	h := host{Cores: runtime.NumCPU(), Go: runtime.Version(), KVM: false, LoadAvgStart: loadavg()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb)
		h.MemoryMB = kb / 1024
	}
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	h.Libvirt = first("/usr/sbin/libvirtd", "--version")
	h.QEMU = first("qemu-system-x86_64", "--version")
	return h
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// translatorRun benchmarks the translator on -corpus, by default the
// example corpus' vmi-fedora.yaml.
func translatorRun(e *env, r *results, o options) error {
	input := o.corpus
	if input == "" {
		dir, err := repo.Corpus()
		if err != nil {
			return err
		}
		input = filepath.Join(dir, "vmi-fedora.yaml")
	}
	e.logf("translator: %s", input)
	return translator(r, input, o.benchRuns)
}
