package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/notify"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

const repeatSyncs = 10

// steadyStats is how many GetDomainStats calls of the running guest are
// timed per run, after the first.
const steadyStats = 10

type bench struct {
	env *env
	r   *results
	o   options

	seed  string // capability cache copied from a cold run
	cache *cacheInfo
	// profile is the largest mappings of each process of the last run,
	// at its memory sample.
	profile map[string][]mapping
	// imgs are the pods' root file systems (podImages), once unpacked.
	imgs map[string]*podImage
}

// cacheInfo records where the capability cache lives and whether libvirt
// kept a seeded one.
type cacheInfo struct {
	Path        string   `json:"path"`
	Files       []string `json:"files"`
	Bytes       int64    `json:"bytes"`
	WarmRuns    int      `json:"warmRuns"`
	Accepted    int      `json:"warmRunsAccepted"`
	RejectNotes []string `json:"rejected,omitempty"`
}

func (b *bench) cleanup() {
	if b.env.keep {
		return
	}
	if b.seed != "" {
		os.RemoveAll(b.seed)
	}
	for _, img := range b.imgs {
		os.RemoveAll(img.root)
	}
}

// runs does -runs cold and -runs warm launcher runs, alternating, the first
// cold run providing the cache the warm ones are seeded with.
func (b *bench) runs(ctx context.Context) error {
	var errs []string
	for i := 0; i < 2*b.o.runs && ctx.Err() == nil; i++ {
		warm := i%2 == 1
		if warm && b.seed == "" {
			continue
		}
		if err := b.fullRun(ctx, i, warm); err != nil {
			b.env.logf("run %d failed: %v", i, err)
			errs = append(errs, fmt.Sprintf("run %d: %v", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d runs failed:\n%s", len(errs), 2*b.o.runs, strings.Join(errs, "\n"))
	}
	return nil
}

func (b *bench) fullRun(ctx context.Context, i int, warm bool) error {
	mode, seed := "cold", ""
	if warm {
		mode, seed = "warm", b.seed
	}
	e, r := b.env, b.r
	e.logf("run %d (%s cache): start", i, mode)
	in, err := newInstance(ctx, e, fmt.Sprintf("bench%d", i), seed)
	if err != nil {
		return err
	}
	defer in.cleanup()
	seededAt := time.Now()
	if err := in.start(); err != nil {
		return err
	}
	if err := in.waitReady(ctx); err != nil {
		return err
	}
	if err := in.firstSync(ctx); err != nil {
		return err
	}
	// virt-handler may scrape metrics at any moment: the first
	// GetDomainStats right after the first Sync is the worst case.
	statsFirst, err := in.domainStats(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	defined, err := in.waitEvent(wctx, in.syncSentAt, "ADDED", func(e stamped) bool { return e.typ == notify.EventAdded })
	if err != nil {
		return err
	}
	running, err := in.waitEvent(wctx, in.syncSentAt, "Running", isStatus("Running"))
	if err != nil {
		return err
	}
	firstLine, err := in.console.wait(wctx, "")
	if err != nil {
		return err
	}
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Minute)
	booted, err := in.console.wait(bctx, testguest.MarkerReady)
	bcancel()
	if err != nil {
		return err
	}
	r.between(mode+".virtlogd_sock", in.execAt, in.virtlogdSockAt)
	r.between(mode+".libvirt_sock", in.execAt, in.libvirtSockAt)
	r.between(mode+".ready", in.execAt, in.readyAt)
	r.between(mode+".first_sync", in.syncSentAt, in.syncDoneAt)
	r.between(mode+".sync_defined", in.syncSentAt, defined)
	r.between(mode+".sync_running", in.syncSentAt, running)
	r.between(mode+".sync_console", in.syncSentAt, firstLine)
	r.between(mode+".exec_defined", in.execAt, defined)
	r.between(mode+".exec_running", in.execAt, running)
	r.between(mode+".sync_booted", in.syncSentAt, booted)
	r.addDur(mode+".stats_first", statsFirst)
	syncRunning := running.Sub(in.syncSentAt)
	e.logf("run %d: ready %v, first Sync %v, running %v after Sync, guest ready %v after Sync",
		i, in.readyAt.Sub(in.execAt).Round(time.Millisecond), in.syncDoneAt.Sub(in.syncSentAt).Round(time.Millisecond),
		syncRunning.Round(time.Millisecond), booted.Sub(in.syncSentAt).Round(time.Millisecond))
	b.logPhases(in, mode)

	// The capability cache: the first cold run seeds the warm ones; a warm
	// run's cache was accepted when libvirt did not rewrite it.
	if err := b.checkCache(in, warm, seededAt); err != nil {
		return err
	}

	for k := 0; k < repeatSyncs; k++ {
		d, err := in.repeatSync(ctx)
		if err != nil {
			return err
		}
		r.addDur("repeat_sync", d)
	}
	for k := 0; k < steadyStats; k++ {
		d, err := in.domainStats(ctx)
		if err != nil {
			return err
		}
		r.addDur("stats_steady", d)
	}

	// Steady state, then the memory sample.
	if wait := time.Until(booted.Add(b.o.settle)); wait > 0 {
		e.logf("run %d: steady state for %v", i, wait.Round(time.Second))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := b.sampleOne(in); err != nil {
		return err
	}

	xml, err := in.dumpXML(ctx)
	if err != nil {
		return err
	}
	var lim limitResult
	end, err := in.shutdownAndDelete(ctx, func() error {
		// Between Shutoff and Delete the disks are free: the limit run.
		var err error
		lim, err = in.limit(ctx, xml, seed)
		return err
	})
	if err != nil {
		return err
	}
	r.between("shutdown_shutoff", end.shutdownSent, end.shutoff)
	r.between("delete_final", end.deleteSent, end.finalEvent)
	r.between("final_launcher_exit", end.finalEvent, end.launcherExit)
	r.between("final_monitor_exit", end.finalEvent, end.monitorExit)
	r.addDur(mode+".virsh_define", lim.define)
	r.addDur(mode+".virsh_start", lim.start)
	total := lim.define + lim.start
	r.addDur(mode+".virsh_total", total)
	if total > 0 {
		r.add(mode+".ratio", float64(syncRunning)/float64(total))
	}
	e.logf("run %d: virsh define %v + start %v; shutdown->Shutoff %v; final event->exit %v", i,
		lim.define.Round(time.Millisecond), lim.start.Round(time.Millisecond),
		end.shutoff.Sub(end.shutdownSent).Round(time.Millisecond), end.monitorExit.Sub(end.finalEvent).Round(time.Millisecond))
	return nil
}

// sampleOne records the helpers' memory of one launcher.
func (b *bench) sampleOne(in *instance) error {
	use, count, err := sampleMem(in.procs())
	if err != nil {
		return err
	}
	for _, role := range helperRoles {
		if count[role] != 1 {
			b.r.note("%d %s processes in one launcher", count[role], role)
		}
	}
	var sum memUse
	for _, role := range helperRoles {
		u := use[role]
		sum.add(u)
		b.r.add("mem."+role+".rss", mib(u.RSS))
		b.r.add("mem."+role+".pss", mib(u.PSS))
		b.r.add("mem."+role+".anon", mib(u.Anon))
	}
	b.r.add("mem.helpers.rss", mib(sum.RSS))
	b.r.add("mem.helpers.pss", mib(sum.PSS))
	b.r.add("mem.qemu.rss", mib(use[roleQEMU].RSS))
	b.profile = profileOf(in.procs())
	b.env.logf("memory: helpers RSS %.1f MiB PSS %.1f MiB (monitor %.1f, launcher %.1f, daemon %.1f, virtlogd %.1f RSS)",
		mib(sum.RSS), mib(sum.PSS), mib(use[roleMonitor].RSS), mib(use[roleLauncher].RSS), mib(use[roleDaemon].RSS), mib(use[roleVirtlogd].RSS))
	return nil
}

func mib(kb int64) float64 { return float64(kb) / 1024 }

func (b *bench) checkCache(in *instance, warm bool, seededAt time.Time) error {
	ents, err := os.ReadDir(in.capsDir())
	if err != nil {
		return fmt.Errorf("capability cache: %w", err)
	}
	if !warm {
		if b.seed != "" {
			return nil
		}
		dir, err := os.MkdirTemp(b.env.workRoot, "seed-")
		if err != nil {
			return err
		}
		if err := copyDir(in.capsDir(), dir); err != nil {
			return fmt.Errorf("save capability cache: %w", err)
		}
		b.seed = dir
		b.cache = &cacheInfo{Path: "<private dir>/libvirt/qemu/cache/capabilities ($XDG_CACHE_HOME/libvirt/qemu/cache/capabilities of the session daemon)"}
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				b.cache.Files = append(b.cache.Files, e.Name())
				b.cache.Bytes += fi.Size()
			}
		}
		return nil
	}
	b.cache.WarmRuns++
	accepted := len(ents) > 0
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return err
		}
		// Seeded files carry the copy's mtime; a re-probe rewrites them
		// after the daemon started.
		if fi.ModTime().After(seededAt) {
			accepted = false
			b.cache.RejectNotes = append(b.cache.RejectNotes, fmt.Sprintf("%s rewritten %v after the launcher's exec", e.Name(), fi.ModTime().Sub(seededAt)))
		}
	}
	if accepted {
		b.cache.Accepted++
	}
	return nil
}

// logPhases reads the launcher's own timings from its log.
func (b *bench) logPhases(in *instance, mode string) {
	f, err := os.Open(in.logPath())
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue
		}
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		dur := func(k string) time.Duration {
			s, _ := m[k].(string)
			d, _ := time.ParseDuration(s)
			return d
		}
		switch m["msg"] {
		case "libvirt daemons up":
			b.r.addDur(mode+".log.daemons_up", dur("took"))
		case "ready":
			b.r.addDur(mode+".log.ready", dur("took"))
		case "domain defined":
			b.r.addDur(mode+".log.prepare_disks", dur("prepareDisks"))
			b.r.addDur(mode+".log.define", dur("define"))
		case "domain started":
			b.r.addDur(mode+".log.create", dur("took"))
		}
	}
}

// seedCache makes a capability cache without a launcher run: a private
// daemon probes QEMU when asked for the domain capabilities.
func (b *bench) seedCache(ctx context.Context) error {
	in, err := newInstance(ctx, b.env, "seed", "")
	if err != nil {
		return err
	}
	defer in.cleanup()
	if err := in.start(); err != nil {
		return err
	}
	if err := in.waitReady(ctx); err != nil {
		return err
	}
	home := filepath.Join(in.dir, "vh")
	if err := in.mkOwned(home); err != nil {
		return err
	}
	if _, _, err := b.env.virsh(ctx, home, in.libvirtSocket(), "domcapabilities", "--virttype", "qemu"); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(b.env.workRoot, "seed-")
	if err != nil {
		return err
	}
	if err := copyDir(in.capsDir(), dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	b.seed = dir
	return nil
}
