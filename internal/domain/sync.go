package domain

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/storage"
	"github.com/virtlauncher/virtlauncher/internal/domain/devices"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// syncer does Sync's work on the manager's domain: the facts the
// converter needs (gather), the define and start (defineAndStart, with the
// hooks of hooks.go), and the changes a running domain needs
// (applyChanges).
type syncer struct {
	// rec holds the grace period and the CBT overlays in the metadata,
	// whether the domain is defined and whether the user paused it.
	rec    *record
	log    *slog.Logger
	layout layout.Layout
	// disks, hooks, baseFacts, devices and restartsOffFile are Config's
	// Disks, Hooks, BaseFacts, Devices and RestartsOffFile.
	disks           DiskPreparer
	hooks           DomainHook
	baseFactsFunc   func() *facts.Context
	devices         func(ctx context.Context, v *v1.VirtualMachineInstance) facts.Devices
	restartsOffFile string
	// net is the network phase; the device appliers use it when the
	// launcher has one (hasNetwork).
	net        *netPhase
	hasNetwork bool
	// terminating is set once the pod goes away: nothing is defined any
	// more.
	terminating *atomic.Bool
	// refresh re-reads the domain and sends it (watcher.refresh).
	refresh func(ctx context.Context, typ string, emit bool)
}

// SyncOptions is what the launcher uses of virt-handler's
// VirtualMachineOptions (the rest of that message is accepted and ignored).
// The manager owns it because Sync consumes it; the command server only
// decodes the wire message into it.
type SyncOptions struct {
	SMBIOS                    *facts.SMBIOS // nil: keep the launcher's default
	MemBalloonStatsPeriod     *uint32       // nil: keep the launcher's default
	PreallocatedVolumes       []string
	FreePageReportingDisabled bool
	BochsDisplayForEFIGuests  bool
	SerialConsoleLogDisabled  bool
	InterfaceDomainAttachment map[string]string
	// HostNUMA is the host topology virt-handler sends (from libvirt's
	// capabilities); empty keeps the launcher's own reading.
	HostNUMA []facts.NUMACell
	// PCIPlacement: the PCINUMAAwareTopology gate and the Grace host
	// devices.
	PCIPlacement facts.PCIPlacement
}

// Sync converges the domain to the VMI (kubevirt-wire.md section 4, end):
// define it if missing (after preparing its disks), start it only when it
// is down and the VMI is neither Running nor final (paused for
// startStrategy Paused), resume it when it was paused by anything but the
// user, and refresh the grace period. Repeating a Sync changes nothing.
func (m *Manager) Sync(ctx context.Context, v *v1.VirtualMachineInstance, opts SyncOptions) error {
	if err := m.op.lock(ctx); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	defer m.op.unlock()
	if err := m.checkIdentity(v, true); err != nil {
		return err
	}
	m.guest.SyncProbesPaused(v)
	if err := m.sync.syncRestartsOff(v); err != nil {
		return err
	}
	if m.terminating.Load() {
		// virt-handler keeps reconciling while the pod shuts down; an error
		// would become a warning on the VMI. Nothing is defined, started or
		// resumed any more, but the grace period still follows the VMI.
		m.sync.refreshGracePeriod(ctx, v)
		m.log.Info("sync while shutting down: nothing to converge")
		return nil
	}
	if m.cfg.HypervisorErr != nil {
		return m.cfg.HypervisorErr
	}
	m.sync.refreshGracePeriod(ctx, v)
	if err := m.net.start(ctx, v, opts.InterfaceDomainAttachment); err != nil {
		return err
	}

	l, d, exists, err := m.lookup(ctx)
	if err != nil {
		return err
	}
	live := domainNow{exists: exists}
	if exists {
		if live.state, live.reason, err = domainState(l, d); err != nil {
			return err
		}
		m.mu.Lock()
		live.userPaused = m.run.userPaused
		m.mu.Unlock()
	}
	run := decideSync(v, live)
	if run == runDefine && m.mig.awaitingMigration() {
		// The incoming migration defines the domain; one defined now
		// would take its name.
		return errors.New("sync: this pod is a migration target waiting for its domain: nothing is defined")
	}
	if run == runDefine {
		if err := m.sync.defineAndStart(ctx, l, v, opts); err != nil {
			return err
		}
		m.guest.StartCredentials(v)
		return nil
	}
	// The agent's credentials follow the VMI even when the start below
	// fails: the handler syncs again.
	m.guest.StartCredentials(v)
	switch run {
	case runStart:
		if err := m.sync.start(l, d, v); err != nil {
			return err
		}
	case runResume:
		if err := l.DomainResume(d); err != nil {
			return fmt.Errorf("resume domain %s (paused, reason %d): %w", d.Name, live.reason, err)
		}
		m.log.Info("resumed domain paused by libvirt", "domain", d.Name, "pausedReason", live.reason)
	}
	return m.sync.applyChanges(ctx, l, d, v)
}

// applyChanges makes the defined domain match what the VMI asks of it
// while it runs (devices.PlanChanges, made by a devices.Applier): disks of
// hotplugged volumes detached and attached, CD-ROM media changed, disks
// grown, interfaces unplugged and plugged, link states set, each confirmed
// by libvirt before the Sync answers. A change it cannot make fails the
// Sync before any is made; it never answers success for a change not made.
func (x *syncer) applyChanges(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance) error {
	live, err := devices.ReadXML(ctx, l, d, 0)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	want, err := x.wantDisks(v, live)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	a := x.applier(l, d)
	repaired, err := a.FollowDefinition(ctx, live)
	if repaired {
		// A daemon that died during an unplug left the device gone from
		// the running domain but not from what GetDomain last read: the
		// Sync answers with the Domain as it is.
		x.refresh(ctx, EventModified, true)
	}
	if err != nil {
		return err
	}
	plan := devices.PlanChanges(v, want, live, x.layout.HotplugDiskDir, x.net.attach)
	if len(plan.Unsupported) > 0 {
		return fmt.Errorf("sync: not applied to the running domain, nothing changed: %s", strings.Join(plan.Unsupported, "; "))
	}
	if len(plan.Grow) > 0 {
		// A disk grows in a running guest only; a domain that is down
		// (about to start, or stopped for good) is left as it is.
		st, _, err := domainState(l, d)
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		if !active(st) {
			plan.Grow = nil
		}
	}
	if plan.Empty() {
		return nil
	}
	changed, err := a.Apply(ctx, v, plan)
	// Whatever happened, GetDomain and virt-handler must see the devices
	// as they are now: no libvirt event follows a link change, and the
	// device events carry no XML.
	if changed {
		x.refresh(ctx, EventModified, true)
	}
	return err
}

// applier makes device changes to domain d over l.
func (x *syncer) applier(l *libvirt.Libvirt, d libvirt.Domain) *devices.Applier {
	a := &devices.Applier{Client: devices.Libvirt{L: l, D: d}, Log: x.log, HotplugDir: x.layout.HotplugDiskDir}
	if x.hasNetwork {
		a.Network = x.net
	}
	return a
}

// wantDisks converts the VMI's disks as the running domain should have
// them, with the facts of its hotplugged volumes gathered anew (the others
// were gathered at the define and do not change).
func (x *syncer) wantDisks(v *v1.VirtualMachineInstance, live *libvirtxml.Domain) ([]libvirtxml.DomainDisk, error) {
	c, err := x.baseFacts()
	if err != nil {
		return nil, err
	}
	vols, err := x.disks.GatherHotplug(v)
	if err != nil {
		return nil, fmt.Errorf("gather hotplug volume facts: %w", err)
	}
	c.Volumes = vols
	return converter.Disks(devices.PinLiveTargets(v, live), c)
}

// domainNow is what Sync knows of the launcher's domain before it acts:
// whether one is defined, its state (and why it is paused) and whether the
// user paused it through us.
type domainNow struct {
	exists     bool
	state      libvirt.DomainState
	reason     int32
	userPaused bool
}

// runAction is what Sync does to the domain's run state.
type runAction int

const (
	runNothing runAction = iota
	runDefine            // no domain yet: define it and start it
	runStart
	runResume
)

// decideSync is Sync's decision for VMI v and the domain as it is, as
// KubeVirt's launcher makes it. A domain that is not there is defined and
// started. A defined one is started only when it is down and the VMI is
// neither Running (it ran and stopped: the handler decides what follows)
// nor final; it is resumed when paused, unless the user paused it (through
// us, or libvirt says so) or libvirt paused it for its own work, which it
// resumes itself. Whatever the run state, a defined domain's devices then
// follow the VMI: devices.PlanChanges decides which (the hotplug part).
func decideSync(v *v1.VirtualMachineInstance, live domainNow) runAction {
	switch {
	case !live.exists:
		return runDefine
	case !active(live.state):
		if v.Status.Phase == v1.Running || v.IsFinal() {
			return runNothing
		}
		return runStart
	case live.state != libvirt.DomainPaused:
		return runNothing
	case live.userPaused:
		return runNothing
	}
	switch libvirt.DomainPausedReason(live.reason) {
	case libvirt.DomainPausedUser, libvirt.DomainPausedMigration, libvirt.DomainPausedSave, libvirt.DomainPausedDump,
		libvirt.DomainPausedSnapshot, libvirt.DomainPausedShuttingDown, libvirt.DomainPausedStartingUp,
		libvirt.DomainPausedPostcopy:
		return runNothing
	}
	return runResume
}

// baseFacts is a fresh Context with the launcher's own facts, before any
// about the VMI's volumes, which need the disk preparer.
func (x *syncer) baseFacts() (*facts.Context, error) {
	if x.disks == nil {
		return nil, errors.New("no disk preparer configured")
	}
	if x.baseFactsFunc != nil {
		return x.baseFactsFunc(), nil
	}
	return facts.Default(x.layout), nil
}

// gather gathers every outside fact the converter needs for v.
func (x *syncer) gather(ctx context.Context, v *v1.VirtualMachineInstance, opts SyncOptions) (*facts.Context, error) {
	c, err := x.baseFacts()
	if err != nil {
		return nil, err
	}
	vols, err := x.disks.Gather(ctx, v)
	if err != nil {
		return nil, fmt.Errorf("gather volume facts: %w", err)
	}
	for _, name := range opts.PreallocatedVolumes {
		if vol, ok := vols[name]; ok {
			vol.Preallocated = true
			vols[name] = vol
		}
	}
	c.Volumes = vols
	if x.net.ifaces != nil {
		c.Interfaces = x.net.ifaces
	}
	if x.devices != nil {
		c.Devices = x.devices(ctx, v)
	}
	if opts.MemBalloonStatsPeriod != nil {
		c.MemBalloonStatsPeriod = *opts.MemBalloonStatsPeriod
	}
	if len(opts.HostNUMA) > 0 {
		c.HostNUMA = opts.HostNUMA
	}
	c.DomainAttachments = opts.InterfaceDomainAttachment
	c.PCIPlacement = opts.PCIPlacement
	// The cluster settings arrive with the SMBIOS in every handler Sync; a
	// client that sends no options (vlctl, STANDALONE_VMI) keeps the
	// launcher's defaults for all of them.
	if opts.SMBIOS != nil {
		c.SMBIOS = *opts.SMBIOS
		c.FreePageReportingDisabled = opts.FreePageReportingDisabled
		c.SerialConsoleLogDisabled = opts.SerialConsoleLogDisabled
		c.BochsForEFIGuests = opts.BochsDisplayForEFIGuests
	}
	return c, nil
}

func (x *syncer) defineAndStart(ctx context.Context, l *libvirt.Libvirt, v *v1.VirtualMachineInstance, opts SyncOptions) error {
	c, err := x.gather(ctx, v, opts)
	if err != nil {
		return err
	}
	if mem := v.Spec.Domain.Memory; mem != nil && mem.MaxGuest != nil {
		// A QEMU that cannot hotplug the virtio-mem device gets it now,
		// empty (SyncMemory only grows it then).
		ver, err := devices.HypervisorVersion(ctx, l)
		if err != nil {
			return fmt.Errorf("define: %w", err)
		}
		c.VirtioMemAtDefine = ver < devices.VirtioMemHotplugQemu
	}
	dom, err := converter.Convert(v, c)
	if err != nil {
		return err
	}
	xml, err := dom.Marshal()
	if err != nil {
		return fmt.Errorf("marshal domain XML: %w", err)
	}
	t0 := time.Now()
	undo, err := x.disks.Prepare(ctx, v, c.Volumes)
	if err != nil {
		return fmt.Errorf("prepare disks: %w", err)
	}
	devices.GrowOffline(x.log, v, dom, func(name, path string, size int64) error {
		return x.disks.GrowRaw(ctx, path, size, c.Volumes[name].Preallocated)
	})
	t1 := time.Now()
	if x.hooks != nil {
		if xml, err = x.applyHooks(ctx, v, xml, dom.Name); err != nil {
			undo()
			return err
		}
	}
	// The pod began to go away while the disks were prepared: a domain
	// defined now would outlive the launcher's decision to end (it saw
	// none defined). Nothing is left of this Sync.
	if x.terminating.Load() {
		undo()
		return errors.New("sync: the launcher is shutting down: the domain is not defined")
	}
	// Last before the define, so that a Sync failing before it leaves
	// no console log behind.
	created, err := initPrivateDir(x.layout.VMIPrivateDir(string(v.UID)), x.layout.SerialLog(string(v.UID)))
	if err != nil {
		undo()
		return err
	}
	d, err := l.DomainDefineXMLFlags(xml, 0)
	if err != nil {
		// Nothing is left of a Sync that defined nothing: the disks it
		// made (a 256-disk VMI the daemon refuses wrote gigabytes) and
		// the console log.
		undo()
		if created {
			os.Remove(x.layout.SerialLog(string(v.UID)))
		}
		return fmt.Errorf("define domain %s: %w", dom.Name, err)
	}
	t2 := time.Now()
	x.rec.mu.Lock()
	x.rec.md.DataFiles = storage.CBTDataFiles(c.Layout, !c.NonRoot, v)
	x.rec.mu.Unlock()
	x.log.Info("domain defined", "domain", dom.Name, "prepareDisks", t1.Sub(t0).String(), "define", t2.Sub(t1).String())
	// The tagged devices' addresses are libvirt's, known from the define
	// on: the ConfigDrive gets them before the guest can read it.
	if err := x.disks.ConfigDriveDevices(v, func() (*libvirtxml.Domain, error) {
		return devices.ReadXML(ctx, l, d, libvirt.DomainXMLInactive)
	}); err != nil {
		if uerr := l.DomainUndefineFlags(d, undefineFlags); uerr != nil {
			x.log.Warn("undefining the domain after a failed device metadata", "domain", dom.Name, "reason", uerr)
		}
		undo()
		return err
	}
	err = x.start(l, d, v)
	// GetDomain right after this Sync must see the domain even if the
	// lifecycle events are still on their way (they send the events), and
	// a termination waiting for this Sync must see it defined.
	x.refresh(ctx, EventModified, false)
	return err
}

func (x *syncer) start(l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance) error {
	var flags uint32
	paused := v.Spec.StartStrategy != nil && *v.Spec.StartStrategy == v1.StartStrategyPaused
	if paused {
		flags |= uint32(libvirt.DomainStartPaused)
	}
	t0 := time.Now()
	if _, err := l.DomainCreateWithFlags(d, flags); err != nil {
		return fmt.Errorf("start domain %s: %w", d.Name, err)
	}
	x.rec.mu.Lock()
	x.rec.run.userPaused = paused
	x.rec.mu.Unlock()
	x.log.Info("domain started", "domain", d.Name, "paused", paused, "took", time.Since(t0).String())
	return nil
}

// refreshGracePeriod keeps DeletionGracePeriodSeconds equal to the VMI's
// and tells the handler when it changed.
func (x *syncer) refreshGracePeriod(ctx context.Context, v *v1.VirtualMachineInstance) {
	g := vmi.GracePeriodSeconds(v)
	x.rec.mu.Lock()
	changed := x.rec.md.GracePeriodSeconds != g
	x.rec.md.GracePeriodSeconds = g
	defined := x.rec.run.defined
	x.rec.mu.Unlock()
	if changed && defined {
		x.refresh(ctx, EventModified, true)
	}
}

// syncRestartsOff keeps the monitor's marker in step with the VMI's
// launcher-restarts annotation: present while the VMI asks for no
// restarts. A Sync that cannot set it fails: the monitor would otherwise
// keep a guest the owner asked to end with its launcher.
func (x *syncer) syncRestartsOff(v *v1.VirtualMachineInstance) error {
	path := x.restartsOffFile
	if path == "" {
		return nil
	}
	if vmi.LauncherRestartsOff(v) {
		if err := safefs.WriteFile(path, nil, 0o644); err != nil {
			return fmt.Errorf("sync: record that the VMI asks for no launcher restarts: %w", err)
		}
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sync: record that the VMI allows launcher restarts: %w", err)
	}
	return nil
}
