package domain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/storage"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/premigration"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// The target side of a live migration (docs/migration.md §3):
// SyncMigrationTarget makes everything the incoming domain needs and
// defines nothing (libvirt's incoming migration creates the domain,
// persistent through PERSIST_DEST); when the domain has arrived and runs,
// the migration's end goes into the metadata, which is what tells
// virt-handler the target took over; FinalizeVirtualMachineMigration then
// sets the guest's clock.

// PrepareMigrationTarget prepares this pod for the incoming migration of
// v: its network's DHCP servers, its disks (containerDisk overlays, the
// generated ISOs, emptyDisks), the console log, the migration proxy
// directory, and the migration's metadata. Asked again, it changes
// nothing.
func (m *Manager) PrepareMigrationTarget(ctx context.Context, v *v1.VirtualMachineInstance, opts SyncOptions) error {
	if err := m.op.lock(ctx); err != nil {
		return fmt.Errorf("prepare migration target: %w", err)
	}
	defer m.op.unlock()
	if err := m.checkIdentity(v, true); err != nil {
		return err
	}
	if m.terminating.Load() {
		return errors.New("prepare migration target: the launcher is shutting down")
	}
	if m.cfg.HypervisorErr != nil {
		return m.cfg.HypervisorErr
	}
	uid, err := migration.MigrationUID(v)
	if err != nil {
		return err
	}
	m.mu.Lock()
	prepared := m.targetOf == uid
	m.mu.Unlock()
	if prepared {
		return nil
	}
	l, _, exists, err := m.lookup(ctx)
	if err != nil {
		return fmt.Errorf("prepare migration target: %w", err)
	}
	if exists {
		return errors.New("prepare migration target: a domain exists in this pod already")
	}
	if err := m.net.start(ctx, v, opts.InterfaceDomainAttachment); err != nil {
		return err
	}
	c, err := m.sync.gather(ctx, v, opts)
	if err != nil {
		return err
	}
	// Converted as for a define, which checks the VMI; the XML that
	// counts is the source's, which the migration brings (edited by the
	// pre-migration hook with what this pod has).
	dom, err := converter.Convert(v, c)
	if err != nil {
		return err
	}
	if err := refuseMediatedDevices(dom); err != nil {
		return err
	}
	undo, err := m.cfg.Disks.Prepare(ctx, v, c.Volumes)
	if err != nil {
		return fmt.Errorf("prepare disks: %w", err)
	}
	if _, err := initPrivateDir(m.cfg.Layout.VMIPrivateDir(string(v.UID)), m.cfg.Layout.SerialLog(string(v.UID))); err != nil {
		undo()
		return err
	}
	// virt-handler's proxy connects to the sockets the incoming QEMU and
	// NBD server listen on there.
	if err := os.MkdirAll(m.cfg.Layout.MigrationProxyDir(), 0o750); err != nil {
		undo()
		return fmt.Errorf("migration proxy directory: %w", err)
	}
	if m.cfg.PreMigrationHooks {
		if err := m.mig.serveMigrationHook(v, dom); err != nil {
			undo()
			return err
		}
	}
	m.warmHostCapabilities(ctx, l)
	now := time.Now()
	m.mu.Lock()
	m.targetOf = uid
	m.md.Migration, _, _ = migration.Start(nil, uid, now)
	m.md.GracePeriodSeconds = vmi.GracePeriodSeconds(v)
	m.md.DataFiles = storage.CBTDataFiles(c.Layout, !c.NonRoot, v)
	m.mu.Unlock()
	m.persist.saveState()
	m.log.Info("migration target prepared", "migration", uid)
	return nil
}

// serveMigrationHook starts the pre-migration hook server for the
// incoming domain, once per pod (KubeVirt v1.9 starts it at the target's
// preparation); a later preparation only gives it that preparation's
// hooks. dom is this pod's conversion of v. The server ends with its one
// call, or with the launcher.
func (x *migrations) serveMigrationHook(v *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	hooks := []premigration.Hook{premigration.DedicatedCPUs(v, dom), premigration.DiskSourcePaths(v)}
	if x.upgradeOrdinalIfaces {
		hooks = append(hooks, premigration.OrdinalTapNames(v))
	}
	x.rec.mu.Lock()
	defer x.rec.mu.Unlock()
	if x.hookServer != nil {
		x.hookServer.SetHooks(hooks...)
		return nil
	}
	s, err := premigration.Serve(x.rec.runContextLocked(), x.layout.MigrationHookSocket(), x.log, hooks...)
	if err != nil {
		return err
	}
	x.hookServer = s
	return nil
}

// migrationArrived follows the incoming domain's lifecycle on a target:
// once it resumed at the migration's end (RESUMED/MIGRATED: pre-copy's
// finish; a post-copy switch-over resumes it with another detail) or, for
// a domain migrated paused, suspended (SUSPENDED/PAUSED), the migration's
// end is recorded, which tells virt-handler the target took over.
// KubeVirt polls the incoming job there as well; libvirt 9.0 answers job
// queries on the source only ("available only on the source host").
func (x *migrations) migrationArrived(ctx context.Context, ev libvirt.DomainEventLifecycleMsg) {
	x.rec.mu.Lock()
	target := x.rec.targetOf != ""
	x.rec.mu.Unlock()
	typ := libvirt.DomainEventType(ev.Event)
	switch {
	case !target:
		return
	case typ == libvirt.DomainEventResumed && libvirt.DomainEventResumedDetailType(ev.Detail) == libvirt.DomainEventResumedMigrated:
	case typ == libvirt.DomainEventSuspended && libvirt.DomainEventSuspendedDetailType(ev.Detail) == libvirt.DomainEventSuspendedPaused:
	default:
		return
	}
	x.rec.mu.Lock()
	mig := x.rec.md.Migration
	ended := mig != nil && mig.EndTimestamp != nil
	if mig != nil && !ended {
		x.rec.md.Migration, _ = migration.Result(mig, false, "", "", time.Now())
	}
	x.rec.mu.Unlock()
	if ended {
		return
	}
	x.log.Info("migration arrived: the target runs the domain", "domain", ev.Dom.Name)
	x.refresh(ctx, EventModified, true)
}

// FinalizeMigration ends the target's part once virt-handler has seen the
// migration end (FinalizeVirtualMachineMigration): the interfaces whose
// binding plugin asks for a link refresh (migration method linkRefresh,
// so that the guest asks for a new lease in the new pod) have their link
// set down and up again, as KubeVirt v1.9's launcher does, and the
// guest's clock, behind by the switch-over, is set again through the
// agent.
func (m *Manager) FinalizeMigration(ctx context.Context, v *v1.VirtualMachineInstance, linkRefresh []string) error {
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	if len(linkRefresh) > 0 {
		// The domain changes: one operation at a time, as for a hotplug.
		if err := m.op.lock(ctx); err != nil {
			return fmt.Errorf("finalize migration: %w", err)
		}
		defer m.op.unlock()
	}
	l, d, ok, err := m.lookup(ctx)
	if err != nil {
		return fmt.Errorf("finalize migration: %w", err)
	}
	if !ok {
		return errors.New("finalize migration: no domain arrived in this pod")
	}
	if err := m.sync.applier(l, d).RefreshLinks(ctx, linkRefresh); err != nil {
		return err
	}
	m.guest.SyncTime("after the migration")
	return nil
}

// AbandonTarget tells the launcher of a migration target to stop waiting
// for the incoming domain (SignalTargetPodCleanup: the migration will not
// come); a domain that has arrived already is unaffected.
//
// It takes effect abandonDelay later, so that the call that asked gets
// its answer before the launcher exits (KubeVirt's launcher looks every
// 2 s).
func (m *Manager) AbandonTarget() {
	time.AfterFunc(abandonDelay, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		select {
		case <-m.mig.abandonCh:
		default:
			close(m.mig.abandonCh)
		}
	})
}

const abandonDelay = time.Second

// Abandoned is closed by AbandonTarget.
func (m *Manager) Abandoned() <-chan struct{} { return m.mig.abandonCh }

// awaitingMigration says whether this pod was prepared as a migration
// target (its domain comes with the migration, if it comes).
func (x *migrations) awaitingMigration() bool {
	x.rec.mu.Lock()
	defer x.rec.mu.Unlock()
	return x.rec.targetOf != ""
}

// refuseMediatedDevices refuses an incoming domain with mediated devices
// (vGPUs): KubeVirt migrates them only under its VGPULiveMigration gate,
// whose pre-migration hook gives the incoming XML the target pod's own
// mediated devices; this launcher has no such hook, and the source's
// devices are not this pod's.
func refuseMediatedDevices(dom *libvirtxml.Domain) error {
	var names []string
	for _, h := range dom.Devices.Hostdevs {
		if h.SubsysMDev == nil {
			continue
		}
		name := "?"
		if h.Alias != nil {
			name = h.Alias.Name
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("prepare migration target: mediated devices (%s): vGPU live migration is not supported by this launcher (the incoming domain would keep the source's devices)", strings.Join(names, ", "))
}
