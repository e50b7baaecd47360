package domain

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

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
	if _, running, err := migration.Start(m.migrationMetadata(), uid, time.Now()); err != nil || running {
		return err
	}
	l, d, ok, err := m.lookup(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !ok {
		return errors.New("migrate: no domain to migrate")
	}
	st, _, err := m.state(l, d)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if !active(st) {
		return fmt.Errorf("migrate: domain %s is not running (state %d)", d.Name, st)
	}
	var req migration.Request
	if err := withContext(ctx, "prepare the migration of "+d.Name, func() error {
		qemu, err := l.ConnectGetVersion()
		if err != nil {
			return fmt.Errorf("QEMU version: %w", err)
		}
		o, why := migration.ForDomain(o, migration.Facts{Paused: st == libvirt.DomainPaused, QEMUVersion: qemu})
		for _, w := range why {
			m.log.Info("migration options changed", "domain", d.Name, "reason", w)
		}
		req, err = m.migrationRequest(l, d, v, o, qemu)
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
	m.refresh(ctx, EventModified, true)
	flags := migration.Flags(o, v.IsBlockMigration(), st == libvirt.DomainPaused)
	m.log.Info("migration starting", "migration", uid, "disks", req.Disks, "flags", fmt.Sprintf("%#x", uint32(flags)),
		"destination", migration.DestinationURI(m.cfg.Layout, string(v.UID), m.systemDaemon()),
		"allowPostCopy", o.AllowPostCopy, "allowWorkloadDisruption", o.AllowWorkloadDisruption)
	go m.runMigration(bg, l, d, v, o, req, flags)
	return nil
}

// migrationRequest builds the call's parameters: the migratable XML, the
// disks to copy, and the daemon's version (parameters it does not know
// fail the whole call).
func (m *Manager) migrationRequest(l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance, o migration.Options, qemu uint64) (migration.Request, error) {
	xml, err := l.DomainGetXMLDesc(d, libvirt.DomainXMLMigratable)
	if err != nil {
		return migration.Request{}, fmt.Errorf("migratable XML of domain %s: %w", d.Name, err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(xml); err != nil {
		return migration.Request{}, fmt.Errorf("parse XML of domain %s: %w", d.Name, err)
	}
	for _, h := range migration.Hazards(dom.Type, qemu) {
		m.log.Warn("this migration may harm the guest", "domain", d.Name, "hazard", h)
	}
	var disks []string
	if dom.Devices != nil && v.IsBlockMigration() {
		disks = migration.CopyDisks(v, dom.Devices.Disks)
	}
	ver, err := l.ConnectGetLibVersion()
	if err != nil {
		return migration.Request{}, fmt.Errorf("libvirt version: %w", err)
	}
	return migration.Request{Layout: m.cfg.Layout, UID: string(v.UID), XML: xml, Name: d.Name,
		Disks: disks, Options: o, LibvirtVersion: ver}, nil
}

// runMigration runs the migration call and its monitor, and records the
// result. bg is the manager's lifetime: the call outlives the RPC.
func (m *Manager) runMigration(bg context.Context, l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance, o migration.Options, req migration.Request, flags libvirt.DomainMigrateFlags) {
	t0 := time.Now()
	done := make(chan error, 1)
	perform := func(req migration.Request, flags libvirt.DomainMigrateFlags) {
		_, err := l.DomainMigratePerform3Params(d, libvirt.OptString{migration.DestinationURI(m.cfg.Layout, req.UID, m.systemDaemon())},
			migration.Params(req), nil, flags)
		done <- err
	}
	go perform(req, flags)
	size := migration.DataSize(v, m.ephemeralBytes())
	mon := migration.NewMonitor(o, size)
	tick := time.NewTicker(migrationPoll)
	defer tick.Stop()
	var throttle int32
	for {
		select {
		case err := <-done:
			if flags&libvirt.MigratePostcopy != 0 && migration.PostCopyUnavailable(err) {
				// AllowPostCopy allows post-copy, it does not ask for
				// it: the target refused it before anything was sent,
				// and still waits. The same migration runs again
				// without it (KubeVirt's launcher fails it, and every
				// migration of that policy to such a node).
				m.log.Warn("the target cannot do post-copy: migrating again without it",
					"domain", d.Name, "reason", err.Error(),
					"why", "the target's QEMU may not use userfaultfd (vm.unprivileged_userfaultfd=0, and QEMU runs unprivileged)",
					"allowWorkloadDisruption", o.AllowWorkloadDisruption)
				o = o.WithoutPostCopy()
				req.Options = o
				flags = migration.Flags(o, flags&libvirt.MigrateNonSharedInc != 0, flags&libvirt.MigratePaused != 0)
				mon = migration.NewMonitor(o, size)
				go perform(req, flags)
				continue
			}
			if err == nil {
				m.logCompletedJob(bg, l, d)
			}
			m.migrationEnded(bg, d.Name, err, time.Since(t0))
			return
		case <-bg.Done():
			// The launcher ends: the daemon goes with it, and the
			// migration with the daemon.
			return
		case <-tick.C:
		}
		jp, err := jobRemaining(bg, l, d)
		if err != nil {
			continue // the job may be ending; the call says how
		}
		m.mu.Lock()
		m.jobInfo = jp.info
		m.mu.Unlock()
		if jp.throttle != throttle {
			// Auto-converge slows the guest down step by step until the
			// migration converges: worth a line each step.
			throttle = jp.throttle
			m.log.Info("migration: auto-converge throttles the guest", "domain", d.Name, "cpuThrottlePercent", throttle)
		}
		remaining := jp.info.DataRemaining
		elapsed := time.Since(t0)
		dec := mon.Check(elapsed, remaining)
		switch dec.Action {
		case migration.Continue:
		case migration.StartPostCopy, migration.Pause:
			if err := m.assistMigration(bg, l, d, dec.Action, elapsed, mon.Acceptable()); err != nil {
				// Asked again at the next reading, as KubeVirt does.
				m.log.Error("assist the migration to complete", "action", dec.Action.String(), "reason", err.Error())
				continue
			}
			mon.Switched(dec.Action)
			m.setMigrationMode(bg, mon.Mode())
		case migration.Abort:
			m.log.Warn("aborting the migration", "reason", dec.Reason)
			if err := callWithin(bg, "abort the migration", func() error { return l.DomainAbortJob(d) }); err != nil {
				m.log.Error("abort the migration", "reason", err.Error())
				continue
			}
			// The call's own failure, which follows, does not overwrite it.
			m.setMigrationResult(bg, true, dec.Reason, v1.MigrationAbortSucceeded)
		}
	}
}

// migrationCallTimeout bounds each libvirt call the migration's monitor
// makes: a daemon that does not answer must not stop the monitor.
const migrationCallTimeout = 10 * time.Second

// callWithin runs the libvirt call f within migrationCallTimeout.
func callWithin(ctx context.Context, what string, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, migrationCallTimeout)
	defer cancel()
	return withContext(ctx, what, f)
}

// assistMigration helps a migration that has not finished in its
// completion time to finish, as AllowWorkloadDisruption lets it: it
// switches it to post-copy (the guest runs on in the target while the
// rest of its memory follows on demand), or, without AllowPostCopy,
// pauses the source's guest so that its memory stops changing. A guest
// paused so stays paused if the migration then fails, as KubeVirt leaves
// it (the VMI shows it paused by the migration monitor): Sync does not
// resume it, Unpause does.
func (m *Manager) assistMigration(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, a migration.Action, elapsed, limit time.Duration) error {
	switch a {
	case migration.StartPostCopy:
		m.log.Info("the migration has not completed in its time: switching it to post-copy",
			"domain", d.Name, "elapsed", elapsed.Round(time.Millisecond).String(), "limit", limit.String())
		return callWithin(ctx, "start post-copy", func() error { return l.DomainMigrateStartPostCopy(d, 0) })
	case migration.Pause:
		m.log.Info("the migration has not completed in its time: pausing the guest so that it can",
			"domain", d.Name, "elapsed", elapsed.Round(time.Millisecond).String(), "limit", limit.String())
		if err := callWithin(ctx, "pause the guest for its migration", func() error { return l.DomainSuspend(d) }); err != nil {
			return err
		}
		m.mu.Lock()
		m.userPaused = true
		m.mu.Unlock()
		m.log.Info("guest paused for its migration", "domain", d.Name, "limit", (2 * limit).String())
		return nil
	}
	return fmt.Errorf("assist the migration: no such action %s", a)
}

// setMigrationMode records the migration's mode in its metadata and sends
// the Domain (virt-handler copies the mode into the VMI's migration state).
func (m *Manager) setMigrationMode(ctx context.Context, mode v1.MigrationMode) {
	m.mu.Lock()
	m.md.Migration = migration.SetMode(m.md.Migration, mode)
	m.mu.Unlock()
	m.log.Info("migration mode", "mode", string(mode))
	m.refresh(ctx, EventModified, true)
}

// migrationEnded records the call's outcome.
func (m *Manager) migrationEnded(ctx context.Context, dom string, err error, took time.Duration) {
	m.mu.Lock()
	m.jobInfo = StatsJobInfo{}
	m.mu.Unlock()
	mig := m.migrationMetadata()
	switch {
	case err == nil:
		m.log.Info("migration completed", "domain", dom, "took", took.String())
		m.setMigrationResult(ctx, false, "", "")
	case mig != nil && mig.AbortStatus == string(v1.MigrationAbortInProgress):
		// CancelMigration asked for the abort that ended the call.
		m.log.Warn("migration cancelled", "domain", dom, "took", took.String())
		m.setMigrationResult(ctx, true, "Live migration aborted ", v1.MigrationAbortSucceeded)
	case mig != nil && mig.EndTimestamp != nil:
		// The monitor's abort, recorded when it was made.
		m.log.Info("migration call ended after its abort", "domain", dom, "reason", err.Error(), "took", took.String())
	default:
		abort := v1.MigrationAbortStatus("")
		if strings.Contains(err.Error(), "canceled by client") {
			abort = v1.MigrationAbortSucceeded
		}
		m.log.Error("migration failed", "domain", dom, "reason", err.Error(), "took", took.String())
		m.setMigrationResult(ctx, true, "Live migration failed "+err.Error(), abort)
	}
}

// setMigrationResult moves the migration metadata (migration.Result) and
// sends the Domain when it changed.
func (m *Manager) setMigrationResult(ctx context.Context, failed bool, reason string, abort v1.MigrationAbortStatus) error {
	m.mu.Lock()
	next, err := migration.Result(m.md.Migration, failed, reason, abort, time.Now())
	changed := err == nil && next != m.md.Migration
	if changed {
		m.md.Migration = next
	}
	m.mu.Unlock()
	if changed {
		m.refresh(ctx, EventModified, true)
	}
	return err
}

// CancelMigration aborts the migration under way
// (CancelVirtualMachineMigration): the abort is asked for, and the
// migration's end, when libvirt has aborted it, is recorded as aborted.
func (m *Manager) CancelMigration(ctx context.Context, v *v1.VirtualMachineInstance) error {
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	m.mu.Lock()
	mig := m.md.Migration
	m.mu.Unlock()
	if mig == nil || mig.EndTimestamp != nil || mig.Failed || mig.StartTimestamp == nil {
		return errors.New("failed to cancel migration - vmi is not migrating")
	}
	if err := m.setMigrationResult(ctx, false, "", v1.MigrationAbortInProgress); err != nil {
		if errors.Is(err, migration.ErrAbortInProgress) {
			return nil // asked already
		}
		return err
	}
	l, d, ok, err := m.lookup(ctx)
	if err == nil && !ok {
		err = errors.New("no domain")
	}
	if err == nil {
		err = withContext(ctx, "abort the migration", func() error { return l.DomainAbortJob(d) })
	}
	if err != nil {
		m.setMigrationResult(ctx, false, "", v1.MigrationAbortFailed)
		return fmt.Errorf("cancel migration: %w", err)
	}
	return nil
}

// jobProgress is what the monitor reads of a running migration job.
type jobProgress struct {
	// info is the job's progress as GetDomainStats reports it; its
	// DataRemaining (bytes) is what the monitor decides by.
	info StatsJobInfo
	// throttle is auto-converge's slow-down of the guest's vCPUs, in
	// percent (0: none, or no auto-converge).
	throttle int32
}

// jobRemaining reads the migration job's remaining data and auto-converge
// throttle; an error when no job runs.
func jobRemaining(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) (jobProgress, error) {
	var typ int32
	var params []libvirt.TypedParam
	if err := callWithin(ctx, "migration job statistics", func() error {
		var err error
		typ, params, err = l.DomainGetJobStats(d, 0)
		return err
	}); err != nil {
		return jobProgress{}, err
	}
	if libvirt.DomainJobType(typ) != libvirt.DomainJobUnbounded {
		return jobProgress{}, errors.New("no migration job")
	}
	jp := jobProgress{info: jobInfoFromParams(params)}
	for _, p := range params {
		if p.Field == libvirt.DomainJobAutoConvergeThrottle {
			if v, ok := p.Value.I.(int32); ok {
				jp.throttle = v
			}
		}
	}
	if !jp.info.DataRemainingSet {
		return jobProgress{}, errors.New("no data_remaining in the job's stats")
	}
	return jp, nil
}

// systemDaemon says whether the launcher's daemon runs in system mode
// (root), which the destination URI names.
func (m *Manager) systemDaemon() bool { return strings.HasSuffix(m.cfg.URI, "/system") }

// ephemeralBytes is what the ephemeral disks (containerDisk overlays,
// emptyDisks) take, for a block migration's size (KubeVirt sums the files
// of the ephemeral disk directory).
func (m *Manager) ephemeralBytes() int64 {
	var n int64
	filepath.WalkDir(m.cfg.Layout.EphemeralDiskDir, func(_ string, e fs.DirEntry, err error) error {
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
func (m *Manager) migrationMetadata() *domainjson.MigrationMetadata {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.md.Migration == nil {
		return nil
	}
	c := *m.md.Migration
	return &c
}

// logCompletedJob logs what libvirt measured of the migration that just
// completed: its time, the guest's downtime, the data moved.
func (m *Manager) logCompletedJob(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) {
	var params []libvirt.TypedParam
	if err := callWithin(ctx, "statistics of the completed migration", func() error {
		var err error
		_, params, err = l.DomainGetJobStats(d, libvirt.DomainJobStatsCompleted)
		return err
	}); err != nil {
		if libvirt.IsNotFound(err) {
			// The source's domain may already be gone (in a cluster
			// virt-handler moves on at once): nothing wrong.
			m.log.Info("no statistics of the completed migration: the domain is gone", "domain", d.Name)
			return
		}
		m.log.Warn("statistics of the completed migration", "reason", err.Error())
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
	m.log.Info("migration statistics", attrs...)
}
