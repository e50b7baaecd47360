package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/samples"
)

// Figure is one measured quantity over repeated runs.
type Figure struct {
	Key     string    `json:"key"`
	Group   string    `json:"group"`
	Label   string    `json:"label"`
	Unit    string    `json:"unit"`
	Samples []float64 `json:"samples"`
	N       int       `json:"n"`
	Median  float64   `json:"median"`
	P95     float64   `json:"p95"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	// KubeVirt is KubeVirt's own launcher's figure, measured once on this
	// kind of machine (text, since some are ranges); empty when there is
	// none.
	KubeVirt string `json:"kubevirt,omitempty"`
	// Target is the bound ours must keep, e.g. "<= 200"; On says whether
	// the median or the p95 is held against it; Met is the verdict.
	Target string   `json:"target,omitempty"`
	On     string   `json:"on,omitempty"`
	Met    *bool    `json:"met,omitempty"`
	limit  *float64 // numeric target
	Note   string   `json:"note,omitempty"`
}

// summarize fills N, Median, P95 (nearest rank), Min, Max.
func (f *Figure) summarize() {
	sum := samples.Summarize(f.Samples)
	f.N, f.Median, f.P95, f.Min, f.Max = sum.N, sum.Median, sum.P95, sum.Min, sum.Max
	if f.N == 0 {
		return
	}
	if f.limit != nil {
		v := f.Median
		if f.On == "p95" {
			v = f.P95
		}
		met := v <= *f.limit
		f.Met = &met
	}
}

// results collects the figures of one bench run in the order they were
// first recorded.
type results struct {
	order []string
	figs  map[string]*Figure
	notes []string
}

func newResults() *results { return &results{figs: map[string]*Figure{}} }

// fig returns the figure key, creating it with the catalog's description.
func (r *results) fig(key string) *Figure {
	if f, ok := r.figs[key]; ok {
		return f
	}
	f := &Figure{Key: key}
	if c, ok := catalog[key]; ok {
		f.Group, f.Label, f.Unit, f.KubeVirt = c.group, c.label, c.unit, c.kubevirt
		if c.target != "" {
			f.Target, f.On = c.target, c.on
			if f.On == "" {
				f.On = "median"
			}
			v := c.limit
			f.limit = &v
		}
	} else if kind, name, ok := pairKey(key); ok {
		f.Group, f.Label, f.Unit = "side by side: "+kind, name.label, name.unit
	} else {
		f.Label, f.Unit = key, "?"
	}
	r.figs[key] = f
	r.order = append(r.order, key)
	return f
}

func (r *results) add(key string, v float64) { f := r.fig(key); f.Samples = append(f.Samples, v) }

func (r *results) addDur(key string, d time.Duration) {
	r.add(key, float64(d)/float64(time.Millisecond))
}

// between adds b-a in ms when both are set.
func (r *results) between(key string, a, b time.Time) {
	if a.IsZero() || b.IsZero() {
		return
	}
	r.addDur(key, b.Sub(a))
}

func (r *results) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// list returns the figures in the catalog's order.
func (r *results) list() []*Figure {
	out := make([]*Figure, 0, len(r.order))
	for _, k := range r.order {
		f := r.figs[k]
		f.summarize()
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return rankOf(out[i].Key) < rankOf(out[j].Key) })
	return out
}

func rankOf(key string) int {
	if r, ok := rank[key]; ok {
		return r
	}
	return len(rank)
}

// print writes the table.
func (r *results) print(w io.Writer) {
	figs := r.list()
	width := 10
	for _, f := range figs {
		width = max(width, len(f.Label))
	}
	group := ""
	fmt.Fprintf(w, "%-*s  %-5s %3s %10s %10s %12s %12s  %s\n", width, "figure", "unit", "n", "median", "p95", "KubeVirt", "target", "")
	fmt.Fprintln(w, strings.Repeat("-", width+66))
	for _, f := range figs {
		if strings.HasPrefix(f.Key, "pair.") {
			continue // printPairs shows them side by side
		}
		if f.Group != group {
			group = f.Group
			fmt.Fprintf(w, "[%s]\n", group)
		}
		verdict := ""
		if f.Met != nil {
			verdict = "met"
			if !*f.Met {
				verdict = "MISSED"
			}
			verdict += " (" + f.On + ")"
		}
		med, p95 := num(f.Median), num(f.P95)
		if f.Unit == "count" {
			med, p95 = fmt.Sprintf("%.0f", f.Median), fmt.Sprintf("%.0f", f.P95)
		}
		fmt.Fprintf(w, "%-*s  %-5s %3d %10s %10s %12s %12s  %s\n", width, f.Label, f.Unit, f.N,
			med, p95, f.KubeVirt, f.Target, verdict)
	}
	for _, n := range r.notes {
		fmt.Fprintln(w, "note: "+n)
	}
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

type spec struct {
	key, group, label, unit, kubevirt, target, on string
	limit                                         float64
}

// catalog indexes catalogList by key; rank gives the printing order.
var catalog, rank = func() (map[string]spec, map[string]int) {
	c, r := map[string]spec{}, map[string]int{}
	for i, s := range catalogList {
		c[s.key], r[s.key] = s, i
	}
	return c, r
}()

// catalogList describes every figure: label, unit, KubeVirt's number (its
// own launcher, measured on this kind of machine) and the bound ours must
// keep (bench/README.md, "The figures").
var catalogList = []spec{
	// fixed overhead
	{key: "mem.monitor.rss", group: "fixed overhead, 1 guest, steady state", label: "monitor RSS", unit: "MiB", kubevirt: "9.2", target: "<= 3", limit: 3},
	{key: "mem.launcher.rss", group: "fixed overhead, 1 guest, steady state", label: "launcher RSS", unit: "MiB", kubevirt: "64.6", target: "<= 15", limit: 15},
	{key: "mem.libvirtd.rss", group: "fixed overhead, 1 guest, steady state", label: "libvirtd RSS", unit: "MiB", kubevirt: "30.9"},
	{key: "mem.virtlogd.rss", group: "fixed overhead, 1 guest, steady state", label: "virtlogd RSS", unit: "MiB", kubevirt: "16.7"},
	{key: "mem.helpers.rss", group: "fixed overhead, 1 guest, steady state", label: "all helpers RSS", unit: "MiB", kubevirt: "121.4", target: "<= 60", limit: 60},
	{key: "mem.monitor.pss", group: "fixed overhead, 1 guest, steady state", label: "monitor PSS", unit: "MiB"},
	{key: "mem.launcher.pss", group: "fixed overhead, 1 guest, steady state", label: "launcher PSS", unit: "MiB"},
	{key: "mem.libvirtd.pss", group: "fixed overhead, 1 guest, steady state", label: "libvirtd PSS", unit: "MiB"},
	{key: "mem.virtlogd.pss", group: "fixed overhead, 1 guest, steady state", label: "virtlogd PSS", unit: "MiB"},
	{key: "mem.helpers.pss", group: "fixed overhead, 1 guest, steady state", label: "all helpers PSS", unit: "MiB"},
	{key: "mem.monitor.anon", group: "fixed overhead, 1 guest, steady state", label: "monitor anonymous", unit: "MiB"},
	{key: "mem.launcher.anon", group: "fixed overhead, 1 guest, steady state", label: "launcher anonymous", unit: "MiB",
		kubevirt: "11-13 heap"},
	{key: "mem.libvirtd.anon", group: "fixed overhead, 1 guest, steady state", label: "libvirtd anonymous", unit: "MiB"},
	{key: "mem.virtlogd.anon", group: "fixed overhead, 1 guest, steady state", label: "virtlogd anonymous", unit: "MiB"},
	{key: "mem.qemu.rss", group: "fixed overhead, 1 guest, steady state", label: "(QEMU RSS, not a helper)", unit: "MiB"},

	// ready
	{key: "cold.virtlogd_sock", group: "ready, cold capability cache", label: "exec -> virtlogd socket", unit: "ms"},
	{key: "cold.libvirt_sock", group: "ready, cold capability cache", label: "exec -> libvirt socket", unit: "ms", kubevirt: "75"},
	{key: "cold.ready", group: "ready, cold capability cache", label: "exec -> launcher-sock", unit: "ms", kubevirt: "550", target: "<= 200", limit: 200},
	{key: "warm.virtlogd_sock", group: "ready, warm capability cache", label: "exec -> virtlogd socket", unit: "ms"},
	{key: "warm.libvirt_sock", group: "ready, warm capability cache", label: "exec -> libvirt socket", unit: "ms", kubevirt: "75"},
	{key: "warm.ready", group: "ready, warm capability cache", label: "exec -> launcher-sock", unit: "ms", kubevirt: "550", target: "<= 200", limit: 200},

	// start
	{key: "cold.first_sync", group: "start, cold capability cache", label: "first Sync (RPC)", unit: "ms", kubevirt: "840", target: "<= 450", limit: 450},
	{key: "cold.sync_defined", group: "start, cold capability cache", label: "Sync -> defined (ADDED)", unit: "ms"},
	{key: "cold.sync_running", group: "start, cold capability cache", label: "Sync -> running", unit: "ms"},
	{key: "cold.sync_console", group: "start, cold capability cache", label: "Sync -> first console line", unit: "ms"},
	{key: "cold.exec_defined", group: "start, cold capability cache", label: "exec -> defined", unit: "ms", kubevirt: "980"},
	{key: "cold.exec_running", group: "start, cold capability cache", label: "exec -> running", unit: "ms", kubevirt: "1410", target: "<= 700", limit: 700},
	{key: "cold.sync_booted", group: "start, cold capability cache", label: "Sync -> guest VL-READY", unit: "ms"},
	{key: "warm.first_sync", group: "start, warm capability cache", label: "first Sync (RPC)", unit: "ms", kubevirt: "840", target: "<= 450", limit: 450},
	{key: "warm.sync_defined", group: "start, warm capability cache", label: "Sync -> defined (ADDED)", unit: "ms"},
	{key: "warm.sync_running", group: "start, warm capability cache", label: "Sync -> running", unit: "ms"},
	{key: "warm.sync_console", group: "start, warm capability cache", label: "Sync -> first console line", unit: "ms"},
	{key: "warm.exec_defined", group: "start, warm capability cache", label: "exec -> defined", unit: "ms", kubevirt: "600"},
	{key: "warm.exec_running", group: "start, warm capability cache", label: "exec -> running", unit: "ms", kubevirt: "1070"},
	{key: "warm.sync_booted", group: "start, warm capability cache", label: "Sync -> guest VL-READY", unit: "ms"},

	// inside the launcher (its own log)
	{key: "cold.log.daemons_up", group: "launcher phases (its log), cold", label: "daemons up", unit: "ms"},
	{key: "cold.log.ready", group: "launcher phases (its log), cold", label: "ready (renamed)", unit: "ms"},
	{key: "cold.log.prepare_disks", group: "launcher phases (its log), cold", label: "prepare disks", unit: "ms"},
	{key: "cold.log.define", group: "launcher phases (its log), cold", label: "DomainDefineXML", unit: "ms"},
	{key: "cold.log.create", group: "launcher phases (its log), cold", label: "DomainCreate", unit: "ms"},
	{key: "warm.log.daemons_up", group: "launcher phases (its log), warm", label: "daemons up", unit: "ms"},
	{key: "warm.log.ready", group: "launcher phases (its log), warm", label: "ready (renamed)", unit: "ms"},
	{key: "warm.log.prepare_disks", group: "launcher phases (its log), warm", label: "prepare disks", unit: "ms"},
	{key: "warm.log.define", group: "launcher phases (its log), warm", label: "DomainDefineXML", unit: "ms"},
	{key: "warm.log.create", group: "launcher phases (its log), warm", label: "DomainCreate", unit: "ms"},

	// the limit
	{key: "cold.virsh_define", group: "the limit: virsh in a private libvirtd, cold", label: "virsh define", unit: "ms"},
	{key: "cold.virsh_start", group: "the limit: virsh in a private libvirtd, cold", label: "virsh start", unit: "ms"},
	{key: "cold.virsh_total", group: "the limit: virsh in a private libvirtd, cold", label: "virsh define + start", unit: "ms"},
	{key: "cold.ratio", group: "the limit: virsh in a private libvirtd, cold", label: "Sync->running / virsh", unit: "x"},
	{key: "warm.virsh_define", group: "the limit: virsh in a private libvirtd, warm", label: "virsh define", unit: "ms"},
	{key: "warm.virsh_start", group: "the limit: virsh in a private libvirtd, warm", label: "virsh start", unit: "ms"},
	{key: "warm.virsh_total", group: "the limit: virsh in a private libvirtd, warm", label: "virsh define + start", unit: "ms"},
	{key: "warm.ratio", group: "the limit: virsh in a private libvirtd, warm", label: "Sync->running / virsh", unit: "x", target: "<= 1.2", limit: 1.2},
	{key: "cold.stats_first", group: "GetDomainStats", label: "first call after Sync, cold", unit: "ms", kubevirt: "12-70", target: "<= 70", limit: 70},
	{key: "warm.stats_first", group: "GetDomainStats", label: "first call after Sync, warm", unit: "ms", kubevirt: "12-70", target: "<= 70", limit: 70},
	{key: "stats_steady", group: "GetDomainStats", label: "later calls (running)", unit: "ms"},
	{key: "repeat_sync", group: "lifecycle", label: "repeated Sync (running)", unit: "ms", kubevirt: "5-9", target: "<= 2", limit: 2},
	{key: "shutdown_shutoff", group: "lifecycle", label: "ACPI shutdown -> Shutoff", unit: "ms", kubevirt: "410"},
	{key: "delete_final", group: "lifecycle", label: "Delete -> final event", unit: "ms"},
	{key: "final_launcher_exit", group: "lifecycle", label: "final event -> launcher exit", unit: "ms", kubevirt: "7800", target: "<= 500", limit: 500},
	{key: "final_monitor_exit", group: "lifecycle", label: "final event -> monitor exit", unit: "ms", kubevirt: "7800", target: "<= 500", limit: 500},

	// density
	{key: "density.ready", group: "density: VMIs started at once", label: "exec -> launcher-sock", unit: "ms"},
	{key: "density.first_sync", group: "density: VMIs started at once", label: "first Sync (RPC)", unit: "ms"},
	{key: "density.sync_running", group: "density: VMIs started at once", label: "Sync -> running", unit: "ms", target: "<= 3000", on: "p95", limit: 3000},
	{key: "density.exec_running", group: "density: VMIs started at once", label: "exec -> running", unit: "ms"},
	{key: "density.sync_booted", group: "density: VMIs started at once", label: "Sync -> guest VL-READY", unit: "ms"},
	{key: "density.booted", group: "density: VMIs started at once", label: "guests booted", unit: "count"},
	{key: "density.helpers.rss", group: "density: VMIs started at once", label: "helper RSS, all VMIs", unit: "MiB"},
	{key: "density.helpers.pss", group: "density: VMIs started at once", label: "helper PSS, all VMIs", unit: "MiB"},
	{key: "density.per_vm.pss", group: "density: VMIs started at once", label: "helper PSS per VMI", unit: "MiB"},

	// guest agent
	{key: "agent.on.launcher_cpu", group: "guest agent: 1 guest, steady state, with and without its agent", label: "launcher CPU, agent polled", unit: "ms/min"},
	{key: "agent.off.launcher_cpu", group: "guest agent: 1 guest, steady state, with and without its agent", label: "launcher CPU, no agent", unit: "ms/min"},
	{key: "agent.on.daemon_cpu", group: "guest agent: 1 guest, steady state, with and without its agent", label: "libvirtd CPU, agent polled", unit: "ms/min"},
	{key: "agent.off.daemon_cpu", group: "guest agent: 1 guest, steady state, with and without its agent", label: "libvirtd CPU, no agent", unit: "ms/min"},
	{key: "agent.on.launcher_rss", group: "guest agent: 1 guest, steady state, with and without its agent", label: "launcher RSS, agent polled", unit: "MiB"},
	{key: "agent.off.launcher_rss", group: "guest agent: 1 guest, steady state, with and without its agent", label: "launcher RSS, no agent", unit: "MiB"},
	{key: "agent.on.daemon_rss", group: "guest agent: 1 guest, steady state, with and without its agent", label: "libvirtd RSS, agent polled", unit: "MiB"},
	{key: "agent.off.daemon_rss", group: "guest agent: 1 guest, steady state, with and without its agent", label: "libvirtd RSS, no agent", unit: "MiB"},

	// live migration
	{key: "migration.source_end", group: "live migration: test guest (128 MiB), block migration, TCG", label: "Migrate -> end in source metadata", unit: "ms"},
	{key: "migration.target_end", group: "live migration: test guest (128 MiB), block migration, TCG", label: "Migrate -> end in target metadata", unit: "ms"},
	{key: "migration.elapsed", group: "live migration: test guest (128 MiB), block migration, TCG", label: "libvirt: job time", unit: "ms"},
	{key: "migration.downtime", group: "live migration: test guest (128 MiB), block migration, TCG", label: "libvirt: downtime", unit: "ms"},
	{key: "migration.data", group: "live migration: test guest (128 MiB), block migration, TCG", label: "libvirt: data moved", unit: "MiB"},

	// launcher restart
	{key: "restart.ping", group: "launcher restart: SIGKILL, the monitor starts a new one, same QEMU", label: "kill -> launcher-sock answers Ping", unit: "ms"},
	{key: "restart.domain", group: "launcher restart: SIGKILL, the monitor starts a new one, same QEMU", label: "kill -> GetDomain has the domain", unit: "ms"},

	// translator
	{key: "translator.convert_per_s", group: "translator: vmi-fedora.yaml", label: "Convert per second", unit: "1/s"},
	{key: "translator.convert_allocs", group: "translator: vmi-fedora.yaml", label: "allocs per Convert", unit: "count"},
	{key: "translator.convert_bytes", group: "translator: vmi-fedora.yaml", label: "bytes per Convert", unit: "B"},
	{key: "translator.marshal_per_s", group: "translator: vmi-fedora.yaml", label: "Convert+Marshal per s", unit: "1/s"},
	{key: "translator.marshal_allocs", group: "translator: vmi-fedora.yaml", label: "allocs per Convert+Marshal", unit: "count"},
}
