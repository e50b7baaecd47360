package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture this runs on.
const clockTicks = 100

// agentConnectedLog is the launcher's log line when its guest agent
// poller starts.
const agentConnectedLog = "guest agent connected: polling it"

// agentRun measures what the guest agent costs the launcher side: pairs of
// runs of the test guest, one with its qemu-guest-agent and one without
// (testguest.OptNoAgent), one after the other, each sampled at steady
// state: the CPU time the launcher and its libvirt daemon use over a
// window (ms per minute) and their RSS at its end. With the agent, the
// launcher polls it at KubeVirt's intervals (the freeze state every 5 s,
// users every 10 s, ...): the difference of the medians is the poller's
// cost.
func (b *bench) agentRun(ctx context.Context) error {
	e, r := b.env, b.r
	if b.seed == "" {
		e.logf("agent: seeding a capability cache first")
		if err := b.seedCache(ctx); err != nil {
			return err
		}
	}
	for i := 0; i < b.o.agentPairs; i++ {
		for _, mode := range []string{"on", "off"} {
			if err := b.agentOne(ctx, i, mode); err != nil {
				return fmt.Errorf("agent %s, pair %d: %w", mode, i, err)
			}
		}
	}
	on, off := r.fig("agent.on.launcher_cpu"), r.fig("agent.off.launcher_cpu")
	on.summarize()
	off.summarize()
	e.logf("agent: launcher CPU %.1f ms/min with the agent, %.1f without (medians)", on.Median, off.Median)
	return nil
}

func (b *bench) agentOne(ctx context.Context, i int, mode string) error {
	e, r := b.env, b.r
	var args []string
	if mode == "off" {
		args = append(args, testguest.OptNoAgent)
	}
	in, err := newInstance(ctx, e, fmt.Sprintf("ag%d%s", i, mode), b.seed, args...)
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
	if err := in.firstSync(ctx); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if _, err := in.console.wait(bctx, testguest.MarkerReady); err != nil {
		return err
	}
	if mode == "on" {
		if err := waitFileHolds(bctx, in.logPath(), agentConnectedLog); err != nil {
			return in.withLog(err)
		}
	} else if err := fileHolds(in.logPath(), agentConnectedLog); err == nil {
		return fmt.Errorf("the launcher polls an agent in a guest that runs none")
	}
	if err := sleepCtx(ctx, b.o.settle); err != nil {
		return err
	}
	cpu0, err := cpuTicks(in.dir)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, b.o.agentWindow); err != nil {
		return err
	}
	cpu1, err := cpuTicks(in.dir)
	if err != nil {
		return err
	}
	minutes := time.Since(t0).Minutes()
	perMin := func(role string) float64 {
		return float64(cpu1[role]-cpu0[role]) * 1000 / clockTicks / minutes
	}
	r.add("agent."+mode+".launcher_cpu", perMin(roleLauncher))
	r.add("agent."+mode+".daemon_cpu", perMin(roleDaemon))
	use, _, err := sampleMem(in.procs())
	if err != nil {
		return err
	}
	r.add("agent."+mode+".launcher_rss", mib(use[roleLauncher].RSS))
	r.add("agent."+mode+".daemon_rss", mib(use[roleDaemon].RSS))
	e.logf("agent %s, pair %d: launcher %.1f ms CPU/min, %.1f MiB; daemon %.1f ms CPU/min, %.1f MiB", mode, i,
		perMin(roleLauncher), mib(use[roleLauncher].RSS), perMin(roleDaemon), mib(use[roleDaemon].RSS))
	_, err = in.shutdownAndDelete(ctx, nil)
	return err
}

// cpuTicks sums the CPU time (user and kernel) of dir's processes per role.
func cpuTicks(dir string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, p := range procsUnder(dir) {
		role := roleOf(p)
		if role == "" {
			continue
		}
		st, err := procfs.ReadStat("/proc", p.pid)
		if err != nil || st.StartTime != p.start {
			continue // exited meanwhile
		}
		out[role] += st.UTime + st.STime
	}
	for _, role := range []string{roleLauncher, roleDaemon} {
		if _, ok := out[role]; !ok {
			return nil, fmt.Errorf("no %s process found under %s", role, dir)
		}
	}
	return out, nil
}

func fileHolds(path, text string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), text) {
		return fmt.Errorf("no %q in %s", text, path)
	}
	return nil
}

// waitFileHolds waits for text to appear in the file.
func waitFileHolds(ctx context.Context, path, text string) error {
	for {
		err := fileHolds(path, text)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
