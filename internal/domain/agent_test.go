package domain

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
)

// TestAgentEventApplies: which agent lifecycle events re-read and re-send
// the Domain. KubeVirt's notifier re-reads on every agent event of its
// domain, whatever the state it reports.
func TestAgentEventApplies(t *testing.T) {
	ev := func(dom string, state libvirt.ConnectDomainEventAgentLifecycleState) *libvirt.DomainEventCallbackAgentLifecycleMsg {
		return &libvirt.DomainEventCallbackAgentLifecycleMsg{Dom: libvirt.Domain{Name: dom}, State: int32(state)}
	}
	cases := []struct {
		name    string
		ours    string
		ev      *libvirt.DomainEventCallbackAgentLifecycleMsg
		applies bool
	}{
		{"connected, our domain", "ns_vm", ev("ns_vm", libvirt.ConnectDomainEventAgentLifecycleStateConnected), true},
		{"disconnected, our domain", "ns_vm", ev("ns_vm", libvirt.ConnectDomainEventAgentLifecycleStateDisconnected), true},
		{"unknown state, our domain", "ns_vm", ev("ns_vm", 0), true},
		{"another domain", "ns_vm", ev("ns_other", libvirt.ConnectDomainEventAgentLifecycleStateConnected), false},
		{"name not learnt yet", "", ev("ns_vm", libvirt.ConnectDomainEventAgentLifecycleStateConnected), true},
	}
	for _, c := range cases {
		if got := agentEventApplies(c.ours, c.ev); got != c.applies {
			t.Errorf("%s: applies=%v, want %v", c.name, got, c.applies)
		}
	}
}
