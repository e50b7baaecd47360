// Package domain is the domain manager: it keeps one libvirt domain in line
// with one VMI over github.com/digitalocean/go-libvirt, and implements
// cmdserver.Manager.
//
// It connects to the launcher's private daemon (retrying while it comes up,
// and again after a daemon restart), subscribes to lifecycle events, keeps a
// cached Domain JSON object current from those events (so GetDomain never
// waits behind a long Sync), and reports every change to an EventSink
// (virt-handler's notify stream in a pod). Mutating operations run one at a
// time.
package domain

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Event types sent to the EventSink. The manager never sends DELETED or
// ERROR (kubevirt-wire.md 2.3): deletion is a MODIFIED object with a
// deletion timestamp.
const (
	EventAdded    = "ADDED"
	EventModified = "MODIFIED"
)

// VMIRef names the VMI a K8s event is about.
type VMIRef struct{ Name, Namespace, UID string }

// EventSink receives domain and Kubernetes events, in order, from one
// goroutine. A call may block (the notify client retries for up to 20 s);
// it never blocks the manager itself.
type EventSink interface {
	DomainEvent(ctx context.Context, eventType string, d *domainjson.Domain) error
	K8sEvent(ctx context.Context, vmi VMIRef, eventType, reason, message string) error
}

// DiskPreparer gathers facts about a VMI's volumes and creates the files
// they need (overlays, empty disks, cloud-init ISOs). disks.Preparer is one.
type DiskPreparer interface {
	Gather(ctx context.Context, vmi *v1.VirtualMachineInstance) (map[string]facts.Volume, error)
	// GatherHotplug is Gather for the hotplugged volumes only.
	GatherHotplug(vmi *v1.VirtualMachineInstance) (map[string]facts.Volume, error)
	// Prepare returns undo, which removes what it made (for a define
	// that fails after it).
	Prepare(ctx context.Context, vmi *v1.VirtualMachineInstance, vols map[string]facts.Volume) (undo func(), err error)
	// ConfigDriveDevices writes the tagged devices' addresses into the
	// ConfigDrive Prepare made; defined reads the defined domain.
	ConfigDriveDevices(vmi *v1.VirtualMachineInstance, defined func() (*libvirtxml.Domain, error)) error
	// GrowRaw grows a raw image file to size bytes (never shrinks it),
	// allocating the new space when preallocated.
	GrowRaw(ctx context.Context, path string, size int64, preallocated bool) error
	// VirtualSize is the virtual size (bytes) of the disk image or device
	// at path.
	VirtualSize(ctx context.Context, path string) (int64, error)
}

// DomainHook may change the domain XML just before it is defined (the hook
// sidecars' OnDefineDomain); hooks.Manager is one.
type DomainHook interface {
	OnDefineDomain(ctx context.Context, domainXML string, vmi *v1.VirtualMachineInstance) (string, error)
}

// Network is the launcher's part of the network setup, per VMI interface:
// it serves what the guest learns (DHCP) on the wiring the privileged phase
// made, and tells the converter each interface's MAC, MTU and tap
// (internal/netsetup/dhcp.Servers).
type Network interface {
	// Serve starts serving the named interfaces of the VMI (every
	// interface it wires when none is named) that are not served yet, and
	// returns the facts of every interface served. attach is
	// virt-handler's InterfaceDomainAttachment (binding plugins with a
	// tap attachment).
	Serve(ctx context.Context, vmi *v1.VirtualMachineInstance, attach map[string]string, names ...string) (map[string]facts.Interface, error)
	// Stop stops serving one interface (an unplugged one).
	Stop(name string) error
	// Close stops serving every interface.
	Close() error
}

// Config configures a Manager: the VMI it is for (Identity), the daemon
// it drives (DaemonConfig), what it keeps on disk (StateConfig), and the
// parts and settings of the launcher it works with.
type Config struct {
	Identity
	DaemonConfig
	StateConfig

	Layout layout.Layout
	Log    *slog.Logger

	Events EventSink    // nil: events are only logged
	Disks  DiskPreparer // required for Sync
	Hooks  DomainHook   // nil: the converter's XML is defined as it is

	// BaseFacts returns a fresh Context with the launcher's own facts
	// (emulation, firmware paths, non-root, defaults of the cluster
	// settings); nil means facts.Default(Layout).
	BaseFacts func() *facts.Context
	// Devices reads what the pod was given for a VMI's host devices (the
	// device plugins' environment, network-info, DRA metadata); nil means
	// nothing was given.
	Devices func(ctx context.Context, v *v1.VirtualMachineInstance) facts.Devices
	// Network is the unprivileged network phase (the DHCP servers of
	// masquerade and bridge interfaces); nil means none.
	Network Network
	// HypervisorErr, when set, makes Sync refuse to define a domain: KVM
	// is unusable and emulation is not allowed.
	HypervisorErr error
	// PreMigrationHooks: a migration target runs the pre-migration hook
	// server (--libvirt-hook-server-and-client), which gives the incoming
	// domain this pod's dedicated CPUs; without it the source places them
	// on the CPUs the target's handler reported (targetCPUs).
	PreMigrationHooks bool
	// UpgradeOrdinalIfaces adds the hook that renames ordinal taps to
	// hashed ones (--upgrade-ordinal-ifaces).
	UpgradeOrdinalIfaces bool

	// AgentIntervals are the guest agent poller's periods; zero ones are
	// KubeVirt's defaults.
	AgentIntervals agent.Intervals
}

// Identity is the VMI identity from the command line (--name,
// --namespace, --uid); empty fields are learnt from the first Sync. A Sync
// for another VMI is refused.
type Identity struct {
	Name, Namespace, UID string
}

// DaemonConfig is the libvirt daemon the manager drives: where it is, where
// it logs QEMU, and how the domain ends without it.
type DaemonConfig struct {
	// Socket is the daemon's unix socket, URI the connection URI
	// (qemu:///session or qemu:///system).
	Socket, URI string

	// QemuLogDir is where the daemon writes the domain's QEMU log
	// (<domain>.log), read for a guest panic's details; "" for unknown.
	QemuLogDir string

	// KillWithoutDaemon, when set, kills the domain's QEMU without the
	// daemon, returning once it is gone, and replaces the daemon: Kill's
	// last resort when the daemon does not destroy the domain in time.
	KillWithoutDaemon func(ctx context.Context) error
}

// StateConfig is what the manager keeps on disk for the launchers after it
// and for the pod's monitor.
type StateConfig struct {
	// StateFile is where the manager keeps its State (LoadState), ""
	// for nowhere; HostUUID is the daemon's host UUID, kept in it.
	StateFile, HostUUID string

	// RestartsOffFile is the marker the manager keeps while the VMI asks
	// for no launcher restarts (vmi.LauncherRestartsOff), for the pod's
	// monitor to read; "" for none.
	RestartsOffFile string
}

// Manager implements cmdserver.Manager.
type Manager struct {
	cfg Config
	log *slog.Logger

	op opLock // one domain operation at a time

	// record is what the manager knows of the VMI and domain beyond
	// libvirt, under its lock (m.mu); finder finds the domain on the
	// connection to the daemon (m.conn, daemonconn.go).
	*record
	finder
	// firstRead is closed once the domain was first read after the
	// first connection: a launcher that took over a running guest
	// must not answer GetDomain with "no domain" before.
	firstRead chan struct{}
	// sync defines, starts and changes the domain for Sync (sync.go,
	// hooks.go); life runs the lifecycle verbs' common parts (verbs.go).
	sync *syncer
	life *lifecycle
	// watch follows the domain: libvirt's events, the cached Domain's
	// refresh and what follows from them (events.go).
	watch *watcher
	// out delivers the events to the sink (outbox.go).
	out *outbox

	terminating atomic.Bool // set by BeginTermination: Sync refuses

	// stats answers the stats calls (statssource.go).
	stats *statsSource

	// guest runs the guest agent operations; its poller fills what it
	// reports while the guest runs with its agent connected (refresh
	// switches it).
	guest *agent.Guest
	// persist keeps the manager's State in its file (state.go).
	persist *stateFile
	// mig runs the live migrations (migrate.go, migrate_target.go), jobs
	// the backups and memory dumps (backup.go, memorydump.go).
	mig  *migrations
	jobs *jobs

	// net is the network phase's state (op).
	net *netPhase
}

type outEvent struct {
	domain *domainjson.Domain
	typ    string
	gone   bool
	// K8s event
	k8s                      bool
	k8sType, reason, message string
	ref                      VMIRef
}

// New makes a Manager. Call Run to connect.
func New(cfg Config) *Manager {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rec := newRecord(cfg.Identity)
	rec.md.GracePeriodSeconds = vmi.DefaultGracePeriodSeconds
	find := finder{conn: &daemonConn{ready: make(chan struct{})}, rec: rec}
	m := &Manager{
		cfg:       cfg,
		log:       log,
		op:        newOpLock(),
		record:    rec,
		finder:    find,
		firstRead: make(chan struct{}),
		out:       newOutbox(cfg.Events, log),
	}
	// The state a previous launcher of the pod left goes into the record
	// before anything reads it.
	m.persist = &stateFile{path: cfg.StateFile, uid: cfg.UID, hostUUID: cfg.HostUUID, log: log, rec: rec}
	m.persist.takeOverState()
	m.guest = m.newGuest()
	m.persist.thaw = m.guest
	m.stats = newStatsSource(&statsSource{
		log:    log,
		lookup: find.lookup,
		cached: func() *domainjson.Domain {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.cache
		},
		// Before Run, nil: no refresher.
		runCtx: func() context.Context {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.runCtx
		},
		agent:        m.guest.Store(),
		agentCommand: m.guest.Command,
	})
	m.watch = &watcher{rec: rec, find: find, log: log, out: m.out, guest: m.guest, qemuLogDir: cfg.QemuLogDir,
		saveState: m.persist.saveState, dropStats: m.stats.drop, warmCaps: m.warmHostCapabilities}
	m.sync = &syncer{rec: rec, log: log, layout: cfg.Layout, disks: cfg.Disks, hooks: cfg.Hooks, baseFactsFunc: cfg.BaseFacts,
		devices: cfg.Devices, restartsOffFile: cfg.RestartsOffFile, hasNetwork: cfg.Network != nil,
		terminating: &m.terminating, refresh: m.watch.refresh}
	m.net = &netPhase{network: cfg.Network, baseFacts: m.sync.baseFacts}
	m.sync.net = m.net
	m.life = &lifecycle{op: m.op, rec: rec, find: find, log: log, refresh: m.watch.refresh}
	m.jobs = &jobs{rec: rec, find: find, log: log, hotplugDir: cfg.Layout.HotplugDiskDir, socketsDir: cfg.Layout.SocketsDir(),
		quiesce: m.guest, refresh: m.watch.refresh}
	m.mig = &migrations{rec: rec, log: log, layout: cfg.Layout, systemDaemon: strings.HasSuffix(cfg.URI, "/system"),
		disks: cfg.Disks, preMigrationHooks: cfg.PreMigrationHooks, upgradeOrdinalIfaces: cfg.UpgradeOrdinalIfaces,
		facts: m.sync.gather, jobInfo: m.stats.setJobInfo, refresh: m.watch.refresh, abandonCh: make(chan struct{})}
	// The migrations send the Domain through the watcher, which tells
	// them of the incoming domain's events.
	m.watch.arrived = m.mig.migrationArrived
	return m
}

// DomainName is KubeVirt's libvirt domain name for a VMI.
func DomainName(namespace, name string) string { return namespace + "_" + name }

// Run connects to the daemon, subscribes to lifecycle events and keeps the
// cache current, reconnecting whenever the connection drops, until ctx
// ends. It also delivers events to the sink. It returns nil when ctx ends.
// reconnectRecheck is when the domain is read again after a reconnect.
const reconnectRecheck = 2 * time.Second

func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.runCtx = ctx
	m.mu.Unlock()
	defer m.guest.StopPolling()
	go m.out.sendLoop(ctx)
	backoff := 20 * time.Millisecond
	first := true
	for {
		l, events, others, err := connectDaemon(ctx, m.cfg.Socket, m.cfg.URI)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.log.Debug("connect to libvirt", "reason", err.Error())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 20 * time.Millisecond
		if !first {
			m.log.Info("reconnected to libvirt")
		}
		m.conn.set(l)
		// A (re)connect may have missed events: re-read the domain. On a
		// reconnect virt-handler expects a MODIFIED event, and so it does
		// from a launcher that found the domain running when it started
		// (its predecessor died; it takes the guest over). A launcher
		// starting afresh finds no domain and sends nothing.
		m.watch.refresh(ctx, EventModified, true)
		m.conn.publish()
		if first {
			close(m.firstRead)
			m.persist.saveState()
			if m.persist.restoredThaw != nil {
				m.persist.resumeThaw(*m.persist.restoredThaw)
			}
		}
		m.mu.Lock()
		takenOver := first && m.run.defined
		m.mu.Unlock()
		if !first || takenOver {
			// A QEMU that dies while the restarted daemon is still
			// reattaching to it produces no lifecycle event (libvirt 9.0):
			// read the state once more after the daemon has settled. A
			// launcher taking a guest over runs a daemon reattaching too.
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(reconnectRecheck):
					m.watch.refresh(ctx, EventModified, true)
				}
			}()
		}
		first = false
		m.watch.eventLoop(ctx, l, events, others)
		m.conn.clear()
		if ctx.Err() != nil {
			disconnect(l)
			return nil
		}
		m.log.Warn("lost the connection to libvirt, reconnecting")
	}
}

// disconnectWait bounds the goodbye to the daemon (a ConnectClose call).
const disconnectWait = 2 * time.Second

// disconnect closes the connection, waiting for the daemon's answer at most
// disconnectWait: a daemon that does not answer must not hold Run's return
// (and with it the launcher's exit). The call then ends in the background.
func disconnect(l *libvirt.Libvirt) {
	ctx, cancel := context.WithTimeout(context.Background(), disconnectWait)
	defer cancel()
	_ = bounded.Call(ctx, "disconnect", l.Disconnect)
}

// Connected waits until the manager has a connection to the daemon and
// has read the domain once through it (a domain already running, taken
// over from a launcher that died, is then known).
func (m *Manager) Connected(ctx context.Context) error {
	if _, err := m.conn.wait(ctx); err != nil {
		return err
	}
	select {
	case <-m.firstRead:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the domain was not read after connecting: %w", ctx.Err())
	}
}

// Defined is closed once a domain has been seen defined.
func (m *Manager) Defined() <-chan struct{} { return m.run.definedCh }

// Stopped is closed when a domain that had been running is no longer
// running (QEMU is gone), or disappeared.
func (m *Manager) Stopped() <-chan struct{} { return m.run.stoppedCh }

// StopState is the libvirt state and reason seen when Stopped closed.
func (m *Manager) StopState() (libvirt.DomainState, int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run.stopState, m.run.stopReason
}

// GoneSent is closed after the final "domain gone" event was handed to the
// sink (delivered, or given up on).
func (m *Manager) GoneSent() <-chan struct{} { return m.out.goneSent }

func active(s libvirt.DomainState) bool {
	switch s {
	case libvirt.DomainRunning, libvirt.DomainBlocked, libvirt.DomainPaused,
		libvirt.DomainShutdown, libvirt.DomainPmsuspended:
		return true
	}
	return false
}

// Close stops what the manager started besides its connection (the DHCP
// servers). Call it after Run returned. It waits for the operation in
// progress until ctx ends (one stuck in a daemon that does not answer
// would otherwise hold the launcher's exit).
func (m *Manager) Close(ctx context.Context) error {
	if err := m.WaitIdle(ctx); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	defer m.op.unlock()
	return m.net.close()
}

// WaitIdle waits until ctx ends for the mutating operation in progress (a
// Sync defining and starting the domain, say), if any, and holds the lock
// when it returns nil.
func (m *Manager) WaitIdle(ctx context.Context) error {
	select {
	case m.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the operation in progress did not end: %w", ctx.Err())
	}
}

// Idle waits until ctx ends for the mutating operation in progress, if
// any, to end.
func (m *Manager) Idle(ctx context.Context) error {
	if err := m.WaitIdle(ctx); err != nil {
		return err
	}
	m.op.unlock()
	return nil
}

// BeginTermination makes every later Sync fail (the pod is going away: no
// domain may be defined or started from now on) and waits, until ctx ends,
// for the operation in progress, if any, so that the caller sees whatever
// a running Sync defined.
func (m *Manager) BeginTermination(ctx context.Context) {
	m.terminating.Store(true)
	if err := m.Idle(ctx); err != nil {
		m.log.Warn("terminating", "reason", err.Error())
	}
}
