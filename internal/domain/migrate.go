package domain

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/premigration"
)

// migrations runs the live migrations of the manager's domain: as their
// source (migrate.go) and as their target (migrate_target.go,
// migrate_cpus.go). Their record is the migration metadata; each change
// is sent (refresh).
type migrations struct {
	// rec holds the migration's metadata, the migration this pod is the
	// target of, and the user's pause (a guest paused for its
	// switch-over stays paused).
	rec    *record
	log    *slog.Logger
	layout layout.Layout
	// systemDaemon: the launcher's daemon runs in system mode (root),
	// which the destination URI names.
	systemDaemon bool
	// disks sizes the volume migration's destination disks.
	disks interface {
		VirtualSize(ctx context.Context, path string) (int64, error)
	}
	// preMigrationHooks and upgradeOrdinalIfaces are Config's.
	preMigrationHooks, upgradeOrdinalIfaces bool
	// facts gathers the converter's facts for a VMI (Manager.Context):
	// the target's CPU placement is converted from them.
	facts func(ctx context.Context, v *v1.VirtualMachineInstance, opts SyncOptions) (*facts.Context, error)
	// jobInfo records the running migration's progress for the stats.
	jobInfo func(StatsJobInfo)
	// refresh re-reads the domain and sends it (watcher.refresh).
	refresh func(ctx context.Context, typ string, emit bool)

	// hookServer is the pre-migration hook server, once a preparation
	// started it (PreMigrationHooks).
	hookServer *premigration.Server
	// abandonCh is closed by AbandonTarget.
	abandonCh chan struct{}
}

// The source side of a live migration (docs/migration.md §2):
// MigrateVirtualMachine starts it and answers at once; a goroutine runs
// libvirt's peer-to-peer migration through the proxy sockets virt-handler
// made in this pod, a monitor aborts one that stops progressing or takes
// too long, and the result goes into the Domain's migration metadata,
// which virt-handler watches. The source domain ends Shutoff/Migrated and
// the launcher exits 0 (launcher.finish).

// migrationPoll is how often the monitor reads the job (KubeVirt's 400 ms).
const migrationPoll = 400 * time.Millisecond

// Migrate starts the migration of the running domain to the target pod
// behind the migration proxy (MigrateVirtualMachine). The same migration
// asked again while it runs is a no-op; one that ended is refused.
func (m *Manager) Migrate(ctx context.Context, v *v1.VirtualMachineInstance, o migration.Options) error {
	if err := m.op.lock(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer m.op.unlock()
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	if cbt := v.Status.ChangedBlockTracking; cbt != nil && cbt.BackupStatus != nil {
		return fmt.Errorf("cannot migrate VMI until backup %s is completed", cbt.BackupStatus.BackupName)
	}
	uid, err := migration.MigrationUID(v)
	if err != nil {
		return err
	}
	if ts := v.Status.MigrationState.TargetState; ts != nil && ts.VirtualMachineInstanceUID != nil && *ts.VirtualMachineInstanceUID != v.UID {
		// KubeVirt rewrites the VMI uid in the XML for it; not done here.
		return fmt.Errorf("migrate: decentralized migration to VMI uid %s is not supported", *ts.VirtualMachineInstanceUID)
	}
	// A migration running or ended is answered first, whatever the
	// domain's state (an ended one left it shut off).
	if _, running, err := migration.Start(m.mig.migrationMetadata(), uid, time.Now()); err != nil || running {
		return err
	}
	l, d, ok, err := m.lookup(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !ok {
		return errors.New("migrate: no domain to migrate")
	}
	st, _, err := domainState(l, d)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !active(st) {
		return fmt.Errorf("migrate: domain %s is not running (state %d)", d.Name, st)
	}
	var req migration.Request
	if err := bounded.Call(ctx, "prepare the migration of "+d.Name, func() error {
		qemu, err := l.ConnectGetVersion()
		if err != nil {
			return fmt.Errorf("QEMU version: %w", err)
		}
		lib, err := l.ConnectGetLibVersion()
		if err != nil {
			return fmt.Errorf("libvirt version: %w", err)
		}
		o, why := migration.ForDomain(o, migration.Facts{Paused: st == libvirt.DomainPaused, QEMUVersion: qemu, LibvirtVersion: lib})
		for _, w := range why {
			m.log.Info("migration options changed", "domain", d.Name, "reason", w)
		}
		req, err = m.mig.migrationRequest(ctx, l, d, v, o, qemu, lib)
		return err
	}); err != nil {
		return err
	}
	o = req.Options
	m.mu.Lock()
	next, running, err := migration.Start(m.md.Migration, uid, time.Now())
	if err == nil && !running {
		m.md.Migration = next
	}
	bg := m.runContextLocked()
	m.mu.Unlock()
	if err != nil || running {
		return err
	}
	m.watch.refresh(ctx, EventModified, true)
	flags := migration.Flags(o, v.IsBlockMigration(), st == libvirt.DomainPaused)
	m.log.Info("migration starting", "migration", uid, "disks", req.Disks, "flags", fmt.Sprintf("%#x", uint32(flags)),
		"destination", migration.DestinationURI(m.cfg.Layout, string(v.UID), m.mig.systemDaemon),
		"allowPostCopy", o.AllowPostCopy, "allowWorkloadDisruption", o.AllowWorkloadDisruption,
		"stallDetection", o.StallDetectorOptions != nil, "maxDowntimeMs", o.MaxDowntimeMs)
	go m.mig.runMigration(bg, l, d, v, o, req, flags)
	return nil
}

// migrationRequest builds the call's parameters: the migratable XML
// (with the volume migration's slices and device kinds,
// migration.MigratedVolumes), the disks to copy, and the daemon's version
// (parameters it does not know fail the whole call).
func (x *migrations) migrationRequest(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance, o migration.Options, qemu, lib uint64) (migration.Request, error) {
	xml, err := l.DomainGetXMLDesc(d, libvirt.DomainXMLMigratable)
	if err != nil {
		return migration.Request{}, fmt.Errorf("migratable XML of domain %s: %w", d.Name, err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(xml); err != nil {
		return migration.Request{}, fmt.Errorf("parse XML of domain %s: %w", d.Name, err)
	}
	for _, h := range migration.Hazards(dom.Type, qemu) {
		x.log.Warn("this migration may harm the guest", "domain", d.Name, "hazard", h)
	}
	var disks []string
	if dom.Devices != nil && v.IsBlockMigration() {
		disks = migration.CopyDisks(v, dom.Devices.Disks)
	}
	changed, err := migration.MigratedVolumes(&dom, v, x.layout, func(path string) (int64, error) {
		return x.disks.VirtualSize(ctx, path)
	})
	if err != nil {
		return migration.Request{}, fmt.Errorf("migrate domain %s: %w", d.Name, err)
	}
	if changed {
		x.log.Info("volume migration: the destination's disks", "domain", d.Name, "volumes", migratedVolumeNames(v))
	}
	if v.IsCPUDedicated() && !x.preMigrationHooks {
		if err := x.targetCPUs(ctx, v, &dom); err != nil {
			return migration.Request{}, fmt.Errorf("migrate domain %s: %w", d.Name, err)
		}
		x.log.Info("dedicated CPUs: the destination's placement on the target's CPU set", "domain", d.Name, "cpus", v.Status.MigrationState.TargetCPUSet)
		changed = true
	}
	if changed {
		// Only then: the XML as libvirt wrote it is what goes otherwise.
		if xml, err = dom.Marshal(); err != nil {
			return migration.Request{}, fmt.Errorf("migratable XML of domain %s: %w", d.Name, err)
		}
	}
	return migration.Request{Layout: x.layout, UID: string(v.UID), XML: xml, Name: d.Name,
		Disks: disks, Options: o, LibvirtVersion: lib}, nil
}

// runMigration runs the migration call and its monitor (the stall
// detector when the options ask for it, else the progress and completion
// timeouts), and records the result. bg is the manager's lifetime: the call
// outlives the RPC.
func (x *migrations) runMigration(bg context.Context, l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance, o migration.Options, req migration.Request, flags libvirt.DomainMigrateFlags) {
	t0 := time.Now()
	done := make(chan error, 1)
	perform := func(req migration.Request, flags libvirt.DomainMigrateFlags) {
		_, err := l.DomainMigratePerform3Params(d, libvirt.OptString{migration.DestinationURI(x.layout, req.UID, x.systemDaemon)},
			migration.Params(req), nil, flags)
		done <- err
	}
	go perform(req, flags)
	ctx, stop := context.WithCancel(bg)
	defer stop()
	size := migration.DataSize(v, x.ephemeralBytes())
	mon := x.newMigrationMonitor(ctx, l, d, o, size)
	tick := time.NewTicker(migrationPoll)
	defer tick.Stop()
	for {
		boundary := false
		select {
		case err := <-done:
			if flags&libvirt.MigratePostcopy != 0 && migration.PostCopyUnavailable(err) {
				// AllowPostCopy allows post-copy, it does not ask for
				// it: the target refused it before anything was sent,
				// and still waits. The same migration runs again
				// without it (KubeVirt's launcher fails it, and every
				// migration of that policy to such a node).
				x.log.Warn("the target cannot do post-copy: migrating again without it",
					"domain", d.Name, "reason", err.Error(),
					"why", "the target's QEMU may not use userfaultfd (vm.unprivileged_userfaultfd=0, and QEMU runs unprivileged)",
					"allowWorkloadDisruption", o.AllowWorkloadDisruption)
				o = o.WithoutPostCopy()
				req.Options = o
				flags = migration.Flags(o, flags&libvirt.MigrateNonSharedInc != 0, flags&libvirt.MigratePaused != 0)
				mon.reset(o, size)
				go perform(req, flags)
				continue
			}
			if err == nil {
				x.logCompletedJob(bg, l, d)
			}
			x.migrationEnded(bg, d.Name, err, time.Since(t0))
			return
		case <-bg.Done():
			// The launcher ends: the daemon goes with it, and the
			// migration with the daemon.
			return
		case <-mon.iterations:
			boundary = true
		case <-tick.C:
		}
		mon.observe(bg, l, d, time.Since(t0), boundary)
	}
}

// migrationMonitor is the source's monitor of one migration: the legacy
// decisions (migration.Monitor) or the stall detector (migration.Stall),
// with what it last read.
type migrationMonitor struct {
	mig        *migrations
	legacy     *migration.Monitor
	stall      *migration.Stall
	iterations <-chan struct{} // the stall detector's pass boundaries
	throttle   int32
}

// newMigrationMonitor makes the monitor o asks for. The stall detector
// learns of QEMU's passes from libvirt's migration iteration events; when
// it cannot subscribe to them it falls back to the legacy monitor, as
// KubeVirt's launcher does.
func (x *migrations) newMigrationMonitor(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, o migration.Options, size int64) *migrationMonitor {
	mon := &migrationMonitor{mig: x}
	if o.StallDetectorOptions != nil {
		it, err := x.migrationIterations(ctx, l, d.Name)
		if err != nil {
			x.log.Error("migration iteration events: falling back to the progress timeout", "domain", d.Name, "reason", err.Error())
			o.StallDetectorOptions = nil
		}
		mon.iterations = it
	}
	mon.reset(o, size)
	return mon
}

// reset starts the decisions again for options o (a migration run again).
func (mon *migrationMonitor) reset(o migration.Options, size int64) {
	mon.legacy, mon.stall = nil, nil
	if o.StallDetectorOptions != nil && mon.iterations != nil {
		mon.stall = migration.NewStall(o, size)
		return
	}
	mon.legacy = migration.NewMonitor(o, size)
}

// migrationIterations subscribes to libvirt's migration iteration events
// of domain dom until ctx ends: one value per pass QEMU begins, dropped
// when the monitor has not taken the last 16 (KubeVirt's queue).
func (x *migrations) migrationIterations(ctx context.Context, l *libvirt.Libvirt, dom string) (<-chan struct{}, error) {
	var evs <-chan any
	if err := callWithin(ctx, "subscribe to migration iteration events", func() error {
		var err error
		evs, err = l.SubscribeEvents(ctx, libvirt.DomainEventIDMigrationIteration, libvirt.OptDomain{})
		return err
	}); err != nil {
		return nil, err
	}
	out := make(chan struct{}, 16)
	go func() {
		for ev := range evs {
			e, ok := ev.(*libvirt.DomainEventCallbackMigrationIterationMsg)
			if !ok || e.Dom.Name != dom {
				continue
			}
			select {
			case out <- struct{}{}:
			default:
				x.log.Info("migration iteration event dropped: the monitor is behind", "domain", dom, "iteration", e.Iteration)
			}
		}
	}()
	return out, nil
}

// observe reads the job and acts on the monitor's decisions.
func (mon *migrationMonitor) observe(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, elapsed time.Duration, boundary bool) {
	x := mon.mig
	jp, jobErr := readJob(ctx, l, d)
	running := jobErr == nil && jp.job.Unbounded
	if running && jp.job.RemainingSet {
		x.jobInfo(jp.info)
		if jp.throttle != mon.throttle {
			// Auto-converge slows the guest down step by step until the
			// migration converges: worth a line each step.
			mon.throttle = jp.throttle
			x.log.Info("migration: auto-converge throttles the guest", "domain", d.Name, "cpuThrottlePercent", mon.throttle)
		}
	}
	if mon.stall != nil {
		mon.observeStall(ctx, l, d, elapsed, boundary, jp, jobErr)
		return
	}
	if !running || !jp.job.RemainingSet {
		return // the job may be ending; the call says how
	}
	dec := mon.legacy.Check(elapsed, jp.job.Remaining)
	if dec.Action == migration.Continue {
		return
	}
	if err := x.migrationAct(ctx, l, d, dec, elapsed, mon.legacy.Acceptable()); err != nil {
		// Asked again at the next reading, as KubeVirt does.
		x.log.Error("migration monitor", "action", dec.Action.String(), "reason", err.Error())
		return
	}
	mon.legacy.Switched(dec.Action)
	if dec.Action == migration.StartPostCopy || dec.Action == migration.Pause {
		x.setMigrationMode(ctx, mon.legacy.Mode())
	}
}

// observeStall gives the stall detector a reading (the job, the domain's
// state, whether an abort is under way) and makes its decisions.
func (mon *migrationMonitor) observeStall(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, elapsed time.Duration, boundary bool, jp jobProgress, jobErr error) {
	x := mon.mig
	r := migration.Reading{Elapsed: elapsed, Boundary: boundary}
	if jobErr == nil {
		r.Job = &jp.job
	}
	var st, reason int32
	if err := callWithin(ctx, "domain state", func() error {
		var err error
		st, reason, err = l.DomainGetState(d, 0)
		return err
	}); err == nil {
		r.PausedForMigration = libvirt.DomainState(st) == libvirt.DomainPaused && libvirt.DomainPausedReason(reason) == libvirt.DomainPausedMigration
	}
	if mig := x.migrationMetadata(); mig != nil {
		r.Aborting = mig.AbortStatus != "" && mig.AbortStatus != string(v1.MigrationAbortFailed)
	}
	before := mon.stall.Mode()
	for _, dec := range mon.stall.Check(r) {
		err := x.migrationAct(ctx, l, d, dec, elapsed, 0)
		if err != nil {
			x.log.Error("migration stall detector", "action", dec.Action.String(), "reason", err.Error())
		}
		mon.stall.Done(dec, err == nil)
	}
	if mode := mon.stall.Mode(); mode != before {
		x.setMigrationMode(ctx, mode)
	}
}

// migrationAct makes one of the monitor's decisions.
func (x *migrations) migrationAct(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, dec migration.Decision, elapsed, limit time.Duration) error {
	switch dec.Action {
	case migration.StartPostCopy, migration.Pause:
		return x.assistMigration(ctx, l, d, dec.Action, elapsed, limit)
	case migration.Abort:
		// Logged once recorded and asked for: whoever reads the reason
		// in the log finds the abort in the Domain's metadata too.
		if err := x.abortMigration(ctx, l, d); err != nil {
			return err
		}
		x.log.Warn("aborted the migration", "domain", d.Name, "reason", dec.Reason)
		return nil
	case migration.SetDowntime:
		x.log.Info("migration: downtime limit", "domain", d.Name, "downtimeMs", dec.Downtime, "reason", dec.Reason)
		return callWithin(ctx, "set the migration's downtime limit", func() error { return l.DomainMigrateSetMaxDowntime(d, dec.Downtime, 0) })
	case migration.MarkPaused:
		// As after the monitor's own pause: Sync leaves the guest paused.
		x.rec.mu.Lock()
		x.rec.run.userPaused = true
		x.rec.mu.Unlock()
		x.log.Info("the guest is paused for its switch-over", "domain", d.Name)
		return nil
	}
	return nil
}

// migrationCallTimeout bounds each libvirt call the migration's monitor
// makes: a daemon that does not answer must not stop the monitor.
const migrationCallTimeout = 10 * time.Second

// callWithin runs the libvirt call f within migrationCallTimeout.
func callWithin(ctx context.Context, what string, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, migrationCallTimeout)
	defer cancel()
	return bounded.Call(ctx, what, f)
}

// assistMigration helps a migration that has not finished in its
// completion time to finish, as AllowWorkloadDisruption lets it: it
// switches it to post-copy (the guest runs on in the target while the
// rest of its memory follows on demand), or, without AllowPostCopy,
// pauses the source's guest so that its memory stops changing. A guest
// paused so stays paused if the migration then fails, as KubeVirt leaves
// it (the VMI shows it paused by the migration monitor): Sync does not
// resume it, Unpause does.
func (x *migrations) assistMigration(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, a migration.Action, elapsed, limit time.Duration) error {
	switch a {
	case migration.StartPostCopy:
		x.log.Info("the migration has not completed in its time: switching it to post-copy",
			"domain", d.Name, "elapsed", elapsed.Round(time.Millisecond).String(), "limit", limit.String())
		return callWithin(ctx, "start post-copy", func() error { return l.DomainMigrateStartPostCopy(d, 0) })
	case migration.Pause:
		x.log.Info("the migration has not completed in its time: pausing the guest so that it can",
			"domain", d.Name, "elapsed", elapsed.Round(time.Millisecond).String(), "limit", limit.String())
		if err := callWithin(ctx, "pause the guest for its migration", func() error { return l.DomainSuspend(d) }); err != nil {
			return err
		}
		x.rec.mu.Lock()
		x.rec.run.userPaused = true
		x.rec.mu.Unlock()
		x.log.Info("guest paused for its migration", "domain", d.Name, "limit", (2 * limit).String())
		return nil
	}
	return fmt.Errorf("assist the migration: no such action %s", a)
}

// setMigrationMode records the migration's mode in its metadata and sends
// the Domain (virt-handler copies the mode into the VMI's migration state).
func (x *migrations) setMigrationMode(ctx context.Context, mode v1.MigrationMode) {
	x.rec.mu.Lock()
	x.rec.md.Migration = migration.SetMode(x.rec.md.Migration, mode)
	x.rec.mu.Unlock()
	x.log.Info("migration mode", "mode", string(mode))
	x.refresh(ctx, EventModified, true)
}

// migrationEnded records the call's outcome.
func (x *migrations) migrationEnded(ctx context.Context, dom string, err error, took time.Duration) {
	x.jobInfo(StatsJobInfo{})
	mig := x.migrationMetadata()
	switch {
	case err == nil:
		x.log.Info("migration completed", "domain", dom, "took", took.String())
		// What KubeVirt's qemu hook does at "release end migrated":
		// libvirt 9.0 calls the release hook without the reason.
		if err := premigration.MarkMigrated(x.layout.MigratedMarker()); err != nil {
			x.log.Error("the domain migrated away, but the backend storage does not say so", "reason", err.Error())
		}
		x.setMigrationResult(ctx, false, "", "")
	case mig != nil && mig.AbortStatus == string(v1.MigrationAbortInProgress):
		// CancelMigration or the monitor asked for the abort that ended
		// the call.
		x.log.Warn("migration cancelled", "domain", dom, "reason", err.Error(), "took", took.String())
		x.setMigrationResult(ctx, true, migrationAborted, v1.MigrationAbortSucceeded)
	case mig != nil && mig.EndTimestamp != nil:
		// The monitor's abort, recorded when it was made.
		x.log.Info("migration call ended after its abort", "domain", dom, "reason", err.Error(), "took", took.String())
	case strings.Contains(err.Error(), "canceled by client"):
		x.log.Warn("migration cancelled", "domain", dom, "reason", err.Error(), "took", took.String())
		x.setMigrationResult(ctx, true, migrationAborted, v1.MigrationAbortSucceeded)
	default:
		x.log.Error("migration failed", "domain", dom, "reason", err.Error(), "took", took.String())
		x.setMigrationResult(ctx, true, "Live migration failed "+err.Error(), "")
	}
}

// migrationAborted is KubeVirt v1.9's failure reason for an aborted
// migration, whoever asked for the abort (CancelVirtualMachineMigration,
// or the monitor: its own reason is in the log only).
const migrationAborted = "Live migration has been aborted"

// setMigrationResult moves the migration metadata (migration.Result) and
// sends the Domain when it changed.
func (x *migrations) setMigrationResult(ctx context.Context, failed bool, reason string, abort v1.MigrationAbortStatus) error {
	x.rec.mu.Lock()
	next, err := migration.Result(x.rec.md.Migration, failed, reason, abort, time.Now())
	changed := err == nil && next != x.rec.md.Migration
	if changed {
		x.rec.md.Migration = next
	}
	x.rec.mu.Unlock()
	if changed {
		x.refresh(ctx, EventModified, true)
	}
	return err
}

// CancelMigration aborts the migration under way
// (CancelVirtualMachineMigration): the abort is asked for, and the
// migration's end, when libvirt has aborted it, is recorded as aborted.
// With no migration under way there is nothing to do, and that is no
// error (KubeVirt v1.9; v1.8 answered "vmi is not migrating").
func (m *Manager) CancelMigration(ctx context.Context, v *v1.VirtualMachineInstance) error {
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	m.mu.Lock()
	mig := m.md.Migration
	m.mu.Unlock()
	if mig == nil || mig.EndTimestamp != nil || mig.Failed || mig.StartTimestamp == nil {
		m.log.Info("cancel migration ignored: the VMI is not migrating")
		return nil
	}
	l, d, ok, err := m.lookup(ctx)
	if err == nil && !ok {
		err = errors.New("no domain")
	}
	if err == nil {
		err = m.mig.abortMigration(ctx, l, d)
	}
	if err != nil {
		return fmt.Errorf("cancel migration: %w", err)
	}
	return nil
}

// abortMigration marks the migration's abort in progress and aborts the
// job; the call's end records the result. An abort already in progress is
// not asked for again; a failed one is recorded as failed (the migration
// goes on).
func (x *migrations) abortMigration(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) error {
	if err := x.setMigrationResult(ctx, false, "", v1.MigrationAbortInProgress); err != nil {
		if errors.Is(err, migration.ErrAbortInProgress) {
			return nil // asked already
		}
		return err
	}
	if err := callWithin(ctx, "abort the migration", func() error { return l.DomainAbortJob(d) }); err != nil {
		x.setMigrationResult(ctx, false, "", v1.MigrationAbortFailed)
		return err
	}
	return nil
}

// jobProgress is what the monitor reads of a running migration job.
type jobProgress struct {
	// info is the job's progress as GetDomainStats reports it.
	info StatsJobInfo
	// job is what the monitors decide by.
	job migration.Job
	// throttle is auto-converge's slow-down of the guest's vCPUs, in
	// percent (0: none, or no auto-converge).
	throttle int32
}

// readJob reads the migration job's statistics; an error when they could
// not be read (job.Unbounded says whether a job runs).
func readJob(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) (jobProgress, error) {
	var typ int32
	var params []libvirt.TypedParam
	if err := callWithin(ctx, "migration job statistics", func() error {
		var err error
		typ, params, err = l.DomainGetJobStats(d, 0)
		return err
	}); err != nil {
		return jobProgress{}, err
	}
	jp := jobProgress{info: jobInfoFromParams(params)}
	j := &jp.job
	j.Unbounded = libvirt.DomainJobType(typ) == libvirt.DomainJobUnbounded
	j.Remaining, j.RemainingSet = jp.info.DataRemaining, jp.info.DataRemainingSet
	j.MemoryBps, j.BpsSet = jp.info.MemoryBps, jp.info.MemoryBpsSet
	for _, p := range params {
		switch p.Field {
		case libvirt.DomainJobAutoConvergeThrottle:
			if v, ok := p.Value.I.(int32); ok {
				jp.throttle = v
			}
		case libvirt.DomainJobTimeElapsed:
			j.ElapsedMs, j.ElapsedSet = paramUint(p)
		case libvirt.DomainJobMemoryIteration:
			j.Iteration, j.IterationSet = paramUint(p)
		}
	}
	return jp, nil
}

// ephemeralBytes is what the ephemeral disks (containerDisk overlays,
// emptyDisks) take, for a block migration's size (KubeVirt sums the files
// of the ephemeral disk directory).
func (x *migrations) ephemeralBytes() int64 {
	var n int64
	filepath.WalkDir(x.layout.EphemeralDiskDir, func(_ string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// migrationMetadata is a copy of the migration metadata (nil: none).
func (x *migrations) migrationMetadata() *domainjson.MigrationMetadata {
	x.rec.mu.Lock()
	defer x.rec.mu.Unlock()
	if x.rec.md.Migration == nil {
		return nil
	}
	c := *x.rec.md.Migration
	return &c
}

// logCompletedJob logs what libvirt measured of the migration that just
// completed: its time, the guest's downtime, the data moved.
func (x *migrations) logCompletedJob(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) {
	var params []libvirt.TypedParam
	if err := callWithin(ctx, "statistics of the completed migration", func() error {
		var err error
		_, params, err = l.DomainGetJobStats(d, libvirt.DomainJobStatsCompleted)
		return err
	}); err != nil {
		if libvirt.IsNotFound(err) {
			// The source's domain may already be gone (in a cluster
			// virt-handler moves on at once): nothing wrong.
			x.log.Info("no statistics of the completed migration: the domain is gone", "domain", d.Name)
			return
		}
		x.log.Warn("statistics of the completed migration", "reason", err.Error())
		return
	}
	attrs := []any{"domain", d.Name}
	for _, p := range params {
		switch p.Field {
		case libvirt.DomainJobTimeElapsed, libvirt.DomainJobDowntime, libvirt.DomainJobDataTotal,
			libvirt.DomainJobMemoryIteration, libvirt.DomainJobDiskTotal:
			attrs = append(attrs, p.Field, p.Value.I)
		}
	}
	x.log.Info("migration statistics", attrs...)
}

// migratedVolumeNames are the volumes status.migratedVolumes lists.
func migratedVolumeNames(v *v1.VirtualMachineInstance) []string {
	var out []string
	for _, mv := range v.Status.MigratedVolumes {
		out = append(out, mv.VolumeName)
	}
	return out
}
