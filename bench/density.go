package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// densityKeys names one set's figures: the host set keeps the keys it has
// always had (density.*), a pod set records pair.<kind>.density_*, which
// printPairs shows side by side.
type densityKeys func(name string) string

var hostDensityKeys = densityKeys(func(name string) string {
	switch name {
	case "helpers_rss":
		return "density.helpers.rss"
	case "helpers_pss":
		return "density.helpers.pss"
	case "pss_per_vmi":
		return "density.per_vm.pss"
	}
	return "density." + name
})

func podDensityKeys(kind string) densityKeys {
	return func(name string) string { return "pair." + kind + ".density_" + name }
}

// densityRun starts -density launchers at the same moment on the host,
// each with a seeded (warm) capability cache, as it always has; then, with
// -kubevirt, -density pods of ours and, once they are gone, -density pods
// of KubeVirt's launcher, in the pair part's pods with cold caches as new
// pods have. The pod sets run one after the other, not together: twice
// the guests on two cores would slow both sets, and neither launcher's
// pages would be shared with the other's anyway (each image is unpacked
// apart).
func (b *bench) densityRun(ctx context.Context) error {
	if b.seed == "" {
		b.env.logf("density: seeding a capability cache first")
		if err := b.seedCache(ctx); err != nil {
			return err
		}
	}
	if err := b.densitySet(ctx, nil, hostDensityKeys); err != nil || !b.o.kubevirt {
		return err
	}
	imgs, err := b.podImages(ctx)
	if err != nil {
		return err
	}
	for _, kind := range []string{kindOurs, kindKubeVirt} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.densitySet(ctx, imgs[kind], podDensityKeys(kind)); err != nil {
			return fmt.Errorf("%s pods: %w", kind, err)
		}
	}
	return nil
}

// densitySet starts -density launchers at the same moment (on the host
// with the warm seed when img is nil, else pods of img with cold caches),
// syncs each as soon as it is ready, waits for every guest to boot, sums
// the helpers' memory and shuts all down. A VMI that does not boot is a
// note, not a failure: the count is a figure.
func (b *bench) densitySet(ctx context.Context, img *podImage, key densityKeys) error {
	e, r, n := b.env, b.r, b.o.density
	what := "host"
	if img != nil {
		what = img.kind + " pods"
	}
	insts := make([]*instance, 0, n)
	defer func() {
		var wg sync.WaitGroup
		for _, in := range insts {
			wg.Add(1)
			go func() { defer wg.Done(); in.cleanup() }()
		}
		wg.Wait()
	}()
	for i := 0; i < n; i++ {
		var in *instance
		var err error
		if img == nil {
			in, err = newInstance(ctx, e, fmt.Sprintf("dens%d", i), b.seed)
		} else {
			in, err = newInstanceIn(ctx, e, img, fmt.Sprintf("d%d%s", i, img.kind[:2]), "")
		}
		if err != nil {
			return err
		}
		insts = append(insts, in)
	}
	e.logf("density (%s): starting %d launchers at once", what, n)
	for _, in := range insts {
		if err := in.start(); err != nil {
			return err
		}
	}
	type outcome struct {
		running, booted time.Time
		err             error
	}
	outs := make([]outcome, n)
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &outs[i]
			if o.err = in.waitReady(ctx); o.err != nil {
				return
			}
			if o.err = in.firstSync(ctx); o.err != nil {
				return
			}
			// Ten TCG guests share two cores with whatever else runs.
			wctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
			defer cancel()
			if o.running, o.err = in.waitEvent(wctx, in.syncSentAt, "Running", isStatus("Running")); o.err != nil {
				return
			}
			o.booted, o.err = in.console.wait(wctx, testguest.MarkerReady)
		}()
	}
	wg.Wait()
	booted := 0
	var last time.Time
	for i, in := range insts {
		o := outs[i]
		r.between(key("ready"), in.execAt, in.readyAt)
		r.between(key("first_sync"), in.syncSentAt, in.syncDoneAt)
		r.between(key("sync_running"), in.syncSentAt, o.running)
		r.between(key("exec_running"), in.execAt, o.running)
		r.between(key("sync_booted"), in.syncSentAt, o.booted)
		if o.err != nil {
			r.note("density (%s) VMI %d: %v", what, i, o.err)
			continue
		}
		booted++
		if o.booted.After(last) {
			last = o.booted
		}
	}
	r.add(key("booted"), float64(booted))
	if booted > 0 {
		e.logf("density (%s): %d of %d guests booted, the last %v after the launchers' exec", what, booted, n, last.Sub(insts[0].execAt).Round(time.Second))
	} else {
		e.logf("density (%s): no guest booted", what)
	}

	// One sample of all pods at once: PSS divides each shared page
	// between the processes that map it at that moment.
	var sum memUse
	for _, in := range insts {
		use, _, err := sampleMem(in.procs())
		if err != nil {
			r.note("density (%s) memory: %v", what, err)
		}
		for _, role := range helperRoles {
			sum.add(use[role])
		}
	}
	r.add(key("helpers_rss"), mib(sum.RSS))
	r.add(key("helpers_pss"), mib(sum.PSS))
	r.add(key("pss_per_vmi"), mib(sum.PSS)/float64(n))
	e.logf("density (%s): helpers of %d VMIs: RSS %.1f MiB, PSS %.1f MiB (%.1f MiB per VMI)", what, n, mib(sum.RSS), mib(sum.PSS), mib(sum.PSS)/float64(n))

	// Shut all down as the handler would.
	for i, in := range insts {
		if outs[i].err != nil || in.client == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := in.shutdownAndDelete(ctx, nil); err != nil {
				r.note("density (%s) VMI %d shutdown: %v", what, i, err)
			}
		}()
	}
	wg.Wait()
	return nil
}
