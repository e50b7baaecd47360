package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// GuestConfig is what a Guest needs of the launcher's domain manager.
type GuestConfig struct {
	Log       *slog.Logger
	Intervals Intervals
	// Lookup finds the launcher's domain without waiting for a connection
	// (ok=false: none is defined; an error: no connection).
	Lookup func() (*libvirt.Libvirt, libvirt.Domain, bool, error)
	// DomainName is the launcher's domain name, "" before it is known.
	DomainName func() string
	// RunContext is the manager's lifetime: what the Guest starts in the
	// background (polling, automatic thaws, time sync) ends with it.
	RunContext func() context.Context
	// Warn sends a Warning event about the VMI (reason, message).
	Warn func(reason, message string)
	// ReportCredentials puts the access credentials' outcome into the
	// Domain's metadata.
	ReportCredentials func(ctx context.Context, succeeded bool, message string)
	// SecretDir is where the pod mounts a secret (by its volume name).
	SecretDir func(name string) string
	// ThawChanged is told when the pending automatic thaw changed
	// (ThawAt), to keep it for a later launcher of the pod.
	ThawChanged func()
}

// Guest runs the guest agent operations of the launcher's domain through
// the daemon: the commands, the poller that fills the Store, the exec and
// ping probes, file system freezes, the guest's time and the access
// credentials.
type Guest struct {
	cfg    GuestConfig
	store  *Store
	poller *Poller

	// probesPaused: the VMI's kubevirt.io/pause-guest-agent-probes
	// annotation was true at the last Sync (Ping passes).
	probesPaused atomic.Bool

	mu sync.Mutex
	// thawTimer is the pending automatic thaw after a Freeze, due at
	// thawAt.
	thawTimer *time.Timer
	thawAt    time.Time
	// timeCancel stops the time sync under way after an unpause.
	timeCancel context.CancelFunc
	// credentialsStarted: the access credentials are being propagated
	// (StartCredentials).
	credentialsStarted bool
}

// NewGuest makes a Guest; its poller starts with SetPolling.
func NewGuest(cfg GuestConfig) *Guest {
	g := &Guest{cfg: cfg, store: NewStore()}
	g.poller = NewPoller(g.Command, g.store, cfg.Intervals, cfg.Log.With("component", "guest-agent"))
	return g
}

// Store is what the guest agent last reported.
func (g *Guest) Store() *Store { return g.store }

// SetPolling polls the agent, or stops, in the manager's lifetime.
func (g *Guest) SetPolling(on bool) { g.poller.Set(g.cfg.RunContext(), on) }

// StopPolling stops the poller for good.
func (g *Guest) StopPolling() { g.poller.Stop() }

// commandTimeoutDefault is libvirt's VIR_DOMAIN_QEMU_AGENT_COMMAND_DEFAULT:
// the daemon's own agent timeout (5 s), as KubeVirt's launcher uses.
const commandTimeoutDefault = -1

// Command runs one guest agent command through the daemon
// (virDomainQemuAgentCommand) and returns the agent's reply text. It does
// not wait for a connection: without one there is no agent to ask.
func (g *Guest) Command(ctx context.Context, command string) (string, error) {
	l, d, err := g.defined()
	if err != nil {
		return "", err
	}
	var reply libvirt.OptString
	err = bounded.Call(ctx, "guest agent command", func() error {
		r, cerr := l.QEMUDomainAgentCommand(d, command, commandTimeoutDefault, 0)
		reply = r
		return cerr
	})
	if err != nil {
		return "", err
	}
	if len(reply) == 0 {
		return "", errors.New("guest agent command: empty reply")
	}
	return reply[0], nil
}

// defined is Lookup for calls that need the domain: its absence is an
// error.
func (g *Guest) defined() (*libvirt.Libvirt, libvirt.Domain, error) {
	l, d, ok, err := g.cfg.Lookup()
	if err != nil {
		return nil, libvirt.Domain{}, err
	}
	if !ok {
		return nil, libvirt.Domain{}, errors.New("no domain is defined")
	}
	return l, d, nil
}

// checkDomainName refuses a request for a domain other than this
// launcher's (KubeVirt's would not find it in its daemon either).
func (g *Guest) checkDomainName(domainName string) error {
	ours := g.cfg.DomainName()
	if ours == "" {
		return errors.New("no domain has been defined yet")
	}
	if domainName != ours {
		return fmt.Errorf("domain %q is not this launcher's (%s)", domainName, ours)
	}
	return nil
}

// Exec runs command in the guest through its agent, for virt-handler's
// exec probes (Exec: KubeVirt's polling and timeout). A non-zero exit is
// an ExitError.
func (g *Guest) Exec(ctx context.Context, domainName, command string, args []string, timeout time.Duration) (string, error) {
	if err := g.checkDomainName(domainName); err != nil {
		return "", err
	}
	return Exec(ctx, g.Command, command, args, timeout)
}

// Ping asks the agent for guest-ping, for virt-handler's guestAgentPing
// probes, as KubeVirt v1.9 does: while the VMI's
// kubevirt.io/pause-guest-agent-probes annotation is true the probe passes
// without asking, and an agent that cannot answer because the guest is
// paused for a healthy reason (by the user, for a migration, a snapshot,
// ...) passes too. A failure also goes to the VMI as a
// GuestAgentPingFailed warning.
func (g *Guest) Ping(ctx context.Context, domainName, vmiName string) error {
	if err := g.checkDomainName(domainName); err != nil {
		return err
	}
	if g.probesPaused.Load() {
		g.cfg.Log.Debug("guest agent ping skipped: probes are paused by the VMI annotation")
		return nil
	}
	_, err := g.Command(ctx, `{"execute":"guest-ping"}`)
	if err == nil {
		return nil
	}
	if unavailable(err) && g.pausedButHealthy() {
		g.cfg.Log.Debug("guest agent ping failed while the guest is paused: passing", "reason", err.Error())
		return nil
	}
	g.cfg.Warn("GuestAgentPingFailed", "GuestAgentPing probe failed for VMI "+vmiName)
	return fmt.Errorf("guest agent ping: %w", err)
}

// unavailable tells a guest agent that cannot answer (not connected, not
// responding) or a domain that is not there from other failures.
func unavailable(err error) bool {
	var le libvirt.Error
	if !errors.As(err, &le) {
		return false
	}
	switch libvirt.ErrorNumber(le.Code) {
	case libvirt.ErrAgentUnresponsive, libvirt.ErrNoDomain:
		return true
	}
	return false
}

// healthyPauseReasons are the paused-state reasons KubeVirt counts as a
// healthy pause for the ping probe.
var healthyPauseReasons = []libvirt.DomainPausedReason{
	libvirt.DomainPausedUser, libvirt.DomainPausedMigration, libvirt.DomainPausedSave, libvirt.DomainPausedDump,
	libvirt.DomainPausedFromSnapshot, libvirt.DomainPausedShuttingDown, libvirt.DomainPausedSnapshot,
	libvirt.DomainPausedStartingUp, libvirt.DomainPausedPostcopy,
}

// pausedButHealthy: the domain is paused for a healthy reason, or gone
// (KubeVirt lets a probe pass while a domain disappears under it).
func (g *Guest) pausedButHealthy() bool {
	l, d, ok, err := g.cfg.Lookup()
	if err != nil {
		return false
	}
	if !ok {
		return true
	}
	st, reason, err := l.DomainGetState(d, 0)
	if err != nil {
		return true
	}
	return libvirt.DomainState(st) == libvirt.DomainPaused && slices.Contains(healthyPauseReasons, libvirt.DomainPausedReason(reason))
}

// SyncProbesPaused follows the VMI's kubevirt.io/pause-guest-agent-probes
// annotation (a strconv.ParseBool truth), read at every Sync as KubeVirt
// does.
func (g *Guest) SyncProbesPaused(vmi *v1.VirtualMachineInstance) {
	paused, _ := strconv.ParseBool(vmi.Annotations[v1.PauseGuestAgentProbesAnnotation])
	if g.probesPaused.Swap(paused) != paused {
		g.cfg.Log.Info("guest agent probe pause changed", "paused", paused)
	}
}
