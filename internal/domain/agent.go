package domain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// agentTimeoutDefault is libvirt's VIR_DOMAIN_QEMU_AGENT_COMMAND_DEFAULT:
// the daemon's own agent timeout (5 s), as KubeVirt's launcher uses.
const agentTimeoutDefault = -1

// agentCommand runs one guest agent command through the daemon
// (virDomainQemuAgentCommand) and returns the agent's reply text. It does
// not wait for a connection: without one there is no agent to ask.
func (m *Manager) agentCommand(ctx context.Context, command string) (string, error) {
	l, d, err := m.definedDomain()
	if err != nil {
		return "", err
	}
	var reply libvirt.OptString
	err = bounded.Call(ctx, "guest agent command", func() error {
		r, cerr := l.QEMUDomainAgentCommand(d, command, agentTimeoutDefault, 0)
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

// definedDomain is lookupNow for calls that need the domain: its absence
// is an error.
func (m *Manager) definedDomain() (*libvirt.Libvirt, libvirt.Domain, error) {
	l, d, ok, err := m.lookupNow()
	if err != nil {
		return nil, libvirt.Domain{}, err
	}
	if !ok {
		return nil, libvirt.Domain{}, errors.New("no domain is defined")
	}
	return l, d, nil
}

// agentConnected tells whether the Domain's guest agent channel is
// connected (what virt-handler's AgentConnected condition reads).
func agentConnected(d *domainjson.Domain) bool {
	for _, c := range d.Spec.Devices.Channels {
		if c.Target != nil && c.Target.Name == compute.GuestAgentChannel {
			return c.Target.State == "connected"
		}
	}
	return false
}

// switchPoller polls the agent while the guest runs with its agent
// connected: KubeVirt's poller starts on the agent's connect event and on
// resume, and stops on disconnect and pause. Reading it from the live
// state each time the Domain is read gives the same switches, and also
// after a reconnect to a restarted daemon.
func (m *Manager) switchPoller(d *domainjson.Domain, st libvirt.DomainState) {
	m.poller.Set(m.pollerContext(), st == libvirt.DomainRunning && agentConnected(d))
}

// pollerContext is Run's context: what the manager starts in the
// background (polling, automatic thaws, time sync) ends with it.
func (m *Manager) pollerContext() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runContextLocked()
}

func (m *Manager) runContextLocked() context.Context {
	if m.runCtx == nil {
		return context.Background()
	}
	return m.runCtx
}

// GuestAgent is what the guest agent last reported, for the command
// server's GetGuestInfo, GetUsers and GetFilesystems.
func (m *Manager) GuestAgent() *agent.Store { return m.agent }

// checkDomainName refuses a request for a domain other than this
// launcher's (KubeVirt's would not find it in its daemon either).
func (m *Manager) checkDomainName(domainName string) error {
	ours, _, _ := m.names()
	if ours == "" {
		return errors.New("no domain has been defined yet")
	}
	if domainName != ours {
		return fmt.Errorf("domain %q is not this launcher's (%s)", domainName, ours)
	}
	return nil
}

// Exec runs command in the guest through its agent, for virt-handler's
// exec probes (agent.Exec: KubeVirt's polling and timeout). A non-zero
// exit is an agent.ExitError.
func (m *Manager) Exec(ctx context.Context, domainName, command string, args []string, timeout time.Duration) (string, error) {
	if err := m.checkDomainName(domainName); err != nil {
		return "", err
	}
	return agent.Exec(ctx, m.agentCommand, command, args, timeout)
}

// GuestPing asks the agent for guest-ping, for virt-handler's
// guestAgentPing probes, as KubeVirt v1.9 does: while the VMI's
// kubevirt.io/pause-guest-agent-probes annotation is true the probe
// passes without asking, and an agent that cannot answer because the
// guest is paused for a healthy reason (by the user, for a migration, a
// snapshot, ...) passes too. A failure also goes to the VMI as a
// GuestAgentPingFailed warning.
func (m *Manager) GuestPing(ctx context.Context, domainName string) error {
	if err := m.checkDomainName(domainName); err != nil {
		return err
	}
	if m.probesPaused.Load() {
		m.log.Debug("guest agent ping skipped: probes are paused by the VMI annotation")
		return nil
	}
	_, err := m.agentCommand(ctx, `{"execute":"guest-ping"}`)
	if err == nil {
		return nil
	}
	if agentUnavailable(err) && m.pausedButHealthy() {
		m.log.Debug("guest agent ping failed while the guest is paused: passing", "reason", err.Error())
		return nil
	}
	_, name, ns := m.names()
	m.queue(outEvent{k8s: true, ref: VMIRef{Name: name, Namespace: ns, UID: m.uidValue()}, k8sType: "Warning",
		reason: "GuestAgentPingFailed", message: "GuestAgentPing probe failed for VMI " + name})
	return fmt.Errorf("guest agent ping: %w", err)
}

// agentUnavailable tells a guest agent that cannot answer (not connected,
// not responding) or a domain that is not there from other failures.
func agentUnavailable(err error) bool {
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
func (m *Manager) pausedButHealthy() bool {
	l, d, ok, err := m.lookupNow()
	if err != nil {
		return false
	}
	if !ok {
		return true
	}
	st, reason, err := m.state(l, d)
	if err != nil {
		return true
	}
	return st == libvirt.DomainPaused && slices.Contains(healthyPauseReasons, libvirt.DomainPausedReason(reason))
}

// syncProbesPaused follows the VMI's kubevirt.io/pause-guest-agent-probes
// annotation (a strconv.ParseBool truth), read at every Sync as KubeVirt
// does.
func (m *Manager) syncProbesPaused(vmi *v1.VirtualMachineInstance) {
	paused, _ := strconv.ParseBool(vmi.Annotations[v1.PauseGuestAgentProbesAnnotation])
	if m.probesPaused.Swap(paused) != paused {
		m.log.Info("guest agent probe pause changed", "paused", paused)
	}
}
