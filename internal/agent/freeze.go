package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// freezeCallTimeout bounds one freeze, thaw or time call to the daemon
// (the agent itself answers within libvirt's 5 s, a freeze within its 60 s
// at worst).
const freezeCallTimeout = 90 * time.Second

// fsFreezeStatus asks the agent whether the guest's file systems are
// frozen ("frozen" or "thawed").
func (g *Guest) fsFreezeStatus(ctx context.Context) (string, error) {
	reply, err := g.Command(ctx, `{"execute":"`+CmdFSFreezeState+`"}`)
	if err != nil {
		return "", err
	}
	st, err := FSFreezeStatus(reply)
	if err != nil {
		return "", err
	}
	// Keep the answer for the Domain too (the poller would within 5 s).
	_ = g.store.Record(CmdFSFreezeState, reply)
	return st, nil
}

// Freeze freezes the guest's file systems through its agent
// (virDomainFSFreeze), for consistent snapshots (virt-freezer, backup
// hooks), as KubeVirt does: nothing to do when they are frozen already,
// and, when unfreezeTimeout is not zero, a thaw of its own after that long
// unless Unfreeze (or another Freeze) comes first, so a freezer that dies
// cannot leave the guest frozen.
//
// The caller checks v is the launcher's VMI.
func (g *Guest) Freeze(ctx context.Context, v *v1.VirtualMachineInstance, unfreezeTimeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	defer cancel()
	st, err := g.fsFreezeStatus(ctx)
	if err != nil {
		return fmt.Errorf("freeze: file system freeze status: %w", err)
	}
	if st == "frozen" {
		return nil
	}
	l, d, err := g.defined()
	if err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	var n int32
	if err := bounded.Call(ctx, "freeze file systems of "+d.Name, func() error {
		var ferr error
		n, ferr = l.DomainFsfreeze(d, nil, 0)
		return ferr
	}); err != nil {
		return err
	}
	g.cfg.Log.Info("guest file systems frozen", "count", n, "unfreezeTimeout", unfreezeTimeout.String())
	g.scheduleThaw(v, unfreezeTimeout)
	_, _ = g.fsFreezeStatus(ctx)
	return nil
}

// Unfreeze thaws the guest's file systems (virDomainFSThaw); nothing to do
// when they are thawed already. It cancels a pending automatic thaw.
func (g *Guest) Unfreeze(ctx context.Context, v *v1.VirtualMachineInstance) error {
	g.scheduleThaw(v, 0)
	ctx, cancel := context.WithTimeout(ctx, freezeCallTimeout)
	defer cancel()
	// As KubeVirt: a thawed guest is left alone (its thaw hooks do not run
	// twice); a failed status query still tries the thaw.
	if st, err := g.fsFreezeStatus(ctx); err == nil && st == "thawed" {
		return nil
	}
	l, d, err := g.defined()
	if err != nil {
		return fmt.Errorf("unfreeze: %w", err)
	}
	if err := bounded.Call(ctx, "thaw file systems of "+d.Name, func() error {
		_, terr := l.DomainFsthaw(d, nil, 0)
		return terr
	}); err != nil {
		return err
	}
	g.cfg.Log.Info("guest file systems thawed")
	_, _ = g.fsFreezeStatus(ctx)
	return nil
}

// scheduleThaw replaces the pending automatic thaw by one after timeout
// (none when timeout is zero).
func (g *Guest) scheduleThaw(v *v1.VirtualMachineInstance, timeout time.Duration) {
	// The due time outlives this launcher (ThawChanged).
	defer g.cfg.ThawChanged()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.thawTimer != nil {
		g.thawTimer.Stop()
		g.thawTimer = nil
	}
	g.thawAt = time.Time{}
	if timeout <= 0 {
		return
	}
	g.thawAt = time.Now().Add(timeout)
	g.thawTimer = time.AfterFunc(timeout, func() {
		g.cfg.Log.Warn("unfreeze was not asked for in time: thawing the guest's file systems", "after", timeout.String())
		if err := g.Unfreeze(g.cfg.RunContext(), v); err != nil {
			g.cfg.Log.Error("automatic thaw failed", "reason", err.Error())
		}
	})
}

// ThawAt is when the pending automatic thaw is due (zero: none).
func (g *Guest) ThawAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.thawAt
}

// ResumeThaw schedules again the automatic thaw of VMI v a previous
// launcher had pending (at once when its time has passed).
func (g *Guest) ResumeThaw(v *v1.VirtualMachineInstance, at time.Time) {
	g.cfg.Log.Info("taking over the pending automatic thaw", "at", at.UTC().Format(time.RFC3339))
	g.scheduleThaw(v, max(time.Until(at), time.Millisecond))
}

// SyncTime sets the guest's clock to the host's through the agent
// (virDomainSetTime) after a pause (why says which: an unpause, a
// migration's switch-over): a guest that was paused is behind by the
// pause. It tries every second for up to a minute while the agent
// is not responding, and gives up at once where the guest cannot do it.
// Best effort, in the background; a newer call replaces an older one.
// (KubeVirt does this after the first unpause of a launcher's life only;
// every unpause leaves the clock behind, so we do it after each.)
func (g *Guest) SyncTime(why string) {
	// Read before g.mu: RunContext takes the manager's lock, which is
	// held while it reads ThawAt.
	run := g.cfg.RunContext()
	g.mu.Lock()
	if g.timeCancel != nil {
		g.timeCancel()
	}
	ctx, cancel := context.WithTimeout(run, time.Minute)
	g.timeCancel = cancel
	g.mu.Unlock()
	go func() {
		defer cancel()
		var last error
		for {
			select {
			case <-ctx.Done():
				if last != nil && !errors.Is(ctx.Err(), context.Canceled) {
					g.cfg.Log.Warn("could not set the guest's time "+why, "reason", last.Error())
				}
				return
			case <-time.After(time.Second):
			}
			l, d, ok, err := g.cfg.Lookup()
			if err != nil || !ok {
				last = fmt.Errorf("no domain: %v", err)
				continue
			}
			now := time.Now()
			err = bounded.Call(ctx, "set guest time", func() error {
				return l.DomainSetTime(d, now.Unix(), uint32(now.Nanosecond()), 0)
			})
			if err == nil {
				g.cfg.Log.Info("guest time set " + why)
				return
			}
			var le libvirt.Error
			if errors.As(err, &le) {
				switch libvirt.ErrorNumber(le.Code) {
				case libvirt.ErrOperationUnsupported, libvirt.ErrArgumentUnsupported:
					g.cfg.Log.Warn("the guest's time cannot be set", "reason", err.Error())
					return
				}
			}
			last = err
		}
	}()
}
