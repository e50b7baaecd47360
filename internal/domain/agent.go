package domain

import (
	"context"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// newGuest makes the guest agent operations (agent.Guest) over the
// manager's domain.
func (m *Manager) newGuest() *agent.Guest {
	return agent.NewGuest(agent.GuestConfig{
		Log:       m.log,
		Intervals: m.cfg.AgentIntervals,
		Lookup:    m.lookupNow,
		DomainName: func() string {
			dom, _, _ := m.names()
			return dom
		},
		RunContext: func() context.Context {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.runContextLocked()
		},
		Warn: func(reason, message string) {
			_, name, ns := m.names()
			m.out.queue(outEvent{k8s: true, ref: VMIRef{Name: name, Namespace: ns, UID: m.uidValue()}, k8sType: "Warning",
				reason: reason, message: message})
		},
		ReportCredentials: m.reportCredentials,
		SecretDir:         m.cfg.Layout.SecretSource,
		ThawChanged:       m.persist.saveState,
	})
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
func switchPoller(g *agent.Guest, d *domainjson.Domain, st libvirt.DomainState) {
	g.SetPolling(st == libvirt.DomainRunning && agentConnected(d))
}

// GuestAgent is what the guest agent last reported, for the command
// server's GetGuestInfo, GetUsers and GetFilesystems.
func (m *Manager) GuestAgent() *agent.Store { return m.guest.Store() }

// Exec runs command in the guest through its agent, for virt-handler's
// exec probes (agent.Guest.Exec).
func (m *Manager) Exec(ctx context.Context, domainName, command string, args []string, timeout time.Duration) (string, error) {
	return m.guest.Exec(ctx, domainName, command, args, timeout)
}

// GuestPing asks the agent for guest-ping, for virt-handler's
// guestAgentPing probes (agent.Guest.Ping).
func (m *Manager) GuestPing(ctx context.Context, domainName string) error {
	_, name, _ := m.names()
	return m.guest.Ping(ctx, domainName, name)
}

// Freeze freezes the guest's file systems through its agent
// (agent.Guest.Freeze).
func (m *Manager) Freeze(ctx context.Context, v *v1.VirtualMachineInstance, unfreezeTimeout time.Duration) error {
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	return m.guest.Freeze(ctx, v, unfreezeTimeout)
}

// Unfreeze thaws the guest's file systems (agent.Guest.Unfreeze).
func (m *Manager) Unfreeze(ctx context.Context, v *v1.VirtualMachineInstance) error {
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	return m.guest.Unfreeze(ctx, v)
}

// reportCredentials puts the access credentials' outcome into the
// Domain's metadata and sends the Domain when it changed.
func (m *Manager) reportCredentials(ctx context.Context, succeeded bool, message string) {
	ac := &domainjson.AccessCredentialMetadata{Succeeded: succeeded, Message: message}
	m.mu.Lock()
	changed := m.md.AccessCredential == nil || *m.md.AccessCredential != *ac
	m.md.AccessCredential = ac
	m.mu.Unlock()
	if changed {
		m.watch.refresh(ctx, EventModified, true)
	}
}
