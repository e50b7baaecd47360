package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// restartPoll is how often launcher-sock is tried after the kill.
const restartPoll = 10 * time.Millisecond

// restartRun measures how fast the monitor brings a launcher that died by
// accident back: the test guest boots in one of our pods, then the
// launcher process (not the monitor) is SIGKILLed -restarts times, and
// each time the figure is the time from the kill to launcher-sock
// answering a Ping again (a fresh dial and Ping every 10 ms, as
// virt-handler's client would reconnect), then to GetDomain showing the
// domain again. After each restart the guest's QEMU must be the same
// process: a restart that rebooted the guest would be a failure, not a
// figure. The monitor's restart budget (5 within 10 minutes by default)
// is raised for this pod to the number of kills, which is what is
// measured here, not the budget. KubeVirt's launcher is not measured: its
// monitor does not restart a launcher, the pod fails.
func (b *bench) restartRun(ctx context.Context) error {
	e, r := b.env, b.r
	if b.seed == "" {
		e.logf("restart: seeding a capability cache first")
		if err := b.seedCache(ctx); err != nil {
			return err
		}
	}
	in, err := newInstance(ctx, e, "rs", b.seed)
	if err != nil {
		return err
	}
	defer in.cleanup()
	in.monitorEnv = []string{
		monitor.EnvRestarts + "=" + strconv.Itoa(b.o.restarts),
		monitor.EnvRestartWindow + "=1h",
	}
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
		return in.withLog(err)
	}
	qemu, ok := in.findRole(roleQEMU)
	if !ok {
		return in.withLog(errors.New("no QEMU process after the guest booted"))
	}
	for i := 0; i < b.o.restarts; i++ {
		if err := b.restartOne(ctx, in, qemu, i); err != nil {
			return fmt.Errorf("kill %d: %w", i, err)
		}
	}
	f := r.fig("restart.ping")
	f.summarize()
	r.note("launcher restart: kill -> launcher-sock answers Ping: min %s ms, max %s ms over %d kills; the same QEMU (pid %d) ran throughout",
		num(f.Min), num(f.Max), f.N, qemu.pid)
	e.logf("restart: kill -> Ping %.0f ms (median of %d), p95 %.0f ms", f.Median, f.N, f.P95)
	return nil
}

// restartOne SIGKILLs the launcher, times its successor's first Ping and
// GetDomain with the domain, and checks QEMU is still the same process.
func (b *bench) restartOne(ctx context.Context, in *instance, qemu proc, i int) error {
	old, ok := in.findRole(roleLauncher)
	if !ok {
		return in.withLog(errors.New("no launcher process to kill"))
	}
	if in.client != nil {
		in.client.Close()
		in.client = nil
	}
	killedAt := time.Now()
	if err := syscall.Kill(old.pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("SIGKILL launcher %d: %w", old.pid, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, pingAt, err := pingAgain(wctx, in)
	if err != nil {
		return in.withLog(err)
	}
	in.client = c
	domainAt, err := domainAgain(wctx, c)
	if err != nil {
		return in.withLog(err)
	}
	if !alive(qemu) {
		return in.withLog(fmt.Errorf("QEMU (pid %d) is gone after the launcher's restart", qemu.pid))
	}
	if nl, ok := in.findRole(roleLauncher); !ok || nl.pid == old.pid {
		return in.withLog(fmt.Errorf("no new launcher process after killing %d", old.pid))
	}
	if in.mon.Exited() {
		return in.withLog(errors.New("the monitor ended"))
	}
	b.r.addDur("restart.ping", pingAt.Sub(killedAt))
	b.r.addDur("restart.domain", domainAt.Sub(killedAt))
	b.env.logf("restart %d: launcher %d killed, Ping after %v, domain after %v, QEMU %d still runs",
		i, old.pid, pingAt.Sub(killedAt).Round(time.Millisecond), domainAt.Sub(killedAt).Round(time.Millisecond), qemu.pid)
	// Let the new launcher finish taking the guest over (its own
	// start-up beyond the first answer) before the next kill.
	return sleepCtx(ctx, time.Second)
}

// pingAgain dials launcher-sock and pings, every restartPoll, until a
// launcher answers; it returns that client and the time of the answer.
func pingAgain(ctx context.Context, in *instance) (*cmdclient.Client, time.Time, error) {
	var last error
	for {
		c, err := cmdclient.Dial(ctx, in.lay.ReadySocket())
		if err == nil {
			if err = c.Ping(ctx); err == nil {
				return c, time.Now(), nil
			}
			c.Close()
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, time.Time{}, fmt.Errorf("launcher-sock did not answer a Ping again: %w (last: %v)", ctx.Err(), last)
		case <-time.After(restartPoll):
		}
	}
}

// domainAgain polls GetDomain until the new launcher has the domain.
func domainAgain(ctx context.Context, c *cmdclient.Client) (time.Time, error) {
	for {
		_, exists, err := c.GetDomain(ctx)
		if err == nil && exists {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("the new launcher has no domain: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(restartPoll):
		}
	}
}

// findRole returns the first process of the instance in role.
func (in *instance) findRole(role string) (proc, bool) {
	for _, p := range in.procs() {
		if roleOf(p) == role {
			return p, true
		}
	}
	return proc{}, false
}
