package domain

import (
	"context"
	"errors"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// agentTimeoutDefault is libvirt's VIR_DOMAIN_QEMU_AGENT_COMMAND_DEFAULT:
// the daemon's own agent timeout (5 s), as KubeVirt's launcher uses.
const agentTimeoutDefault = -1

// agentCommand runs one guest agent command through the daemon
// (virDomainQemuAgentCommand) and returns the agent's reply text. It does
// not wait for a connection: without one there is no agent to ask.
func (m *Manager) agentCommand(ctx context.Context, command string) (string, error) {
	l, d, ok, err := m.lookupNow()
	if err != nil {
		return "", err
	}
	if !ok {
		return "", errors.New("no domain")
	}
	var reply libvirt.OptString
	err = withContext(ctx, "guest agent command", func() error {
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

func (m *Manager) pollerContext() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runCtx == nil {
		return context.Background()
	}
	return m.runCtx
}

// GuestAgent is what the guest agent last reported, for the command
// server's GetGuestInfo, GetUsers and GetFilesystems.
func (m *Manager) GuestAgent() *agent.Store { return m.agent }
