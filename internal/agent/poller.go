package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Intervals are how often each group of commands runs: KubeVirt's
// virt-launcher flags --qemu-agent-{sys,file,user,version}-interval and
// --qemu-fsfreeze-status-interval, with its defaults (DefaultIntervals).
type Intervals struct {
	Sys, File, User, Version, FSFreezeStatus time.Duration
}

// DefaultIntervals are KubeVirt's defaults.
func DefaultIntervals() Intervals {
	return Intervals{
		Sys:            120 * time.Second,
		File:           300 * time.Second,
		User:           10 * time.Second,
		Version:        300 * time.Second,
		FSFreezeStatus: 5 * time.Second,
	}
}

// initialInterval is the first period of every group: a group runs at once
// when polling starts, then after 10 s, doubling up to its interval, so a
// freshly booted guest's data (addresses from DHCP, say) arrives quickly.
const initialInterval = 10 * time.Second

// commandTimeout bounds one agent command. libvirt's own agent timeout is
// 5 s; this is the deadline for the daemon's answer.
const commandTimeout = 10 * time.Second

// group is a set of commands run together at one interval.
type group struct {
	commands []string
	every    time.Duration
}

// groups are KubeVirt's poller workers. KubeVirt reads the sys, user and
// load groups through libvirt's guest-info API, which runs these same
// agent commands; the daemon here (libvirt 9.0) has no guest-info load
// type, so the load average comes from the agent's guest-get-load
// directly, at the sys interval as KubeVirt's load worker. An agent
// without the command fails it every round, as libvirt does there.
func (iv Intervals) groups() []group {
	return []group{
		{[]string{CmdInfo}, iv.Version},
		{[]string{CmdFSInfo}, iv.File},
		{[]string{CmdFSFreezeState}, iv.FSFreezeStatus},
		// The Domain data last: when its change is sent, the host name
		// and time zone of the same round are in the store already.
		{[]string{CmdHostName, CmdTimezone, CmdOSInfo, CmdInterfaces}, iv.Sys},
		{[]string{CmdUsers}, iv.User},
		{[]string{CmdLoad}, iv.Sys},
	}
}

// Runner runs one agent command (its JSON, {"execute":"..."}) and returns
// the agent's reply text. The domain manager's is libvirt's
// virDomainQemuAgentCommand.
type Runner func(ctx context.Context, command string) (string, error)

// Poller runs the command groups while it is on. It is switched by Set,
// from the domain's observed state.
type Poller struct {
	run   Runner
	store *Store
	iv    Intervals
	log   *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc // non-nil while on
	wg     sync.WaitGroup
	// callMu keeps one agent command in flight at a time: a command to a
	// paused or hung agent holds one of the daemon's few request slots per
	// client (libvirt's max_client_requests, 5) for libvirt's 5 s agent
	// timeout, and five at once would stall the launcher's own calls
	// (Pause, Unpause) behind them.
	callMu sync.Mutex
}

// NewPoller makes a poller that keeps what run returns in store. Zero
// intervals take KubeVirt's defaults.
func NewPoller(run Runner, store *Store, iv Intervals, log *slog.Logger) *Poller {
	d := DefaultIntervals()
	for _, p := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&iv.Sys, d.Sys}, {&iv.File, d.File}, {&iv.User, d.User}, {&iv.Version, d.Version}, {&iv.FSFreezeStatus, d.FSFreezeStatus},
	} {
		if *p.v <= 0 {
			*p.v = p.def
		}
	}
	return &Poller{run: run, store: store, iv: iv, log: log}
}

// Set turns polling on or off: on while the guest runs with its agent
// connected, as KubeVirt's poller starts on the agent's connect event and
// on resume, and stops on disconnect and on pause. Setting the state it is
// already in does nothing. Polling ends with ctx too.
func (p *Poller) Set(ctx context.Context, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.cancel == nil:
		pctx, cancel := context.WithCancel(ctx)
		p.cancel = cancel
		p.log.Info("guest agent connected: polling it")
		for _, g := range p.iv.groups() {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.poll(pctx, g)
			}()
		}
	case !on && p.cancel != nil:
		p.cancel()
		p.cancel = nil
		p.log.Info("guest agent polling stopped")
	}
}

// Stop turns polling off and waits for the commands under way.
func (p *Poller) Stop() {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Poller) poll(ctx context.Context, g group) {
	period := min(initialInterval, g.every)
	for {
		for _, c := range g.commands {
			if ctx.Err() != nil {
				return
			}
			p.runOne(ctx, c)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		period = min(period*2, g.every)
	}
}

// runOne runs one command and records its reply. A failure is logged and
// skipped, as KubeVirt does: the next round tries again, and the data of
// the last good answer stays.
func (p *Poller) runOne(ctx context.Context, command string) {
	p.callMu.Lock()
	defer p.callMu.Unlock()
	if ctx.Err() != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	reply, err := p.run(cctx, `{"execute":"`+command+`"}`)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Debug("guest agent command failed", "command", command, "reason", err.Error())
		}
		return
	}
	if err := p.store.Record(command, reply); err != nil {
		p.log.Warn("guest agent reply not understood", "command", command, "reason", err.Error())
	}
}
