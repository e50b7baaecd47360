package domain

import (
	"context"
	"fmt"
	"time"
)

// agentDataTTLs are how long GetVMStats keeps each agent command's
// answer, KubeVirt's (manager.go agentDataCommandTTLs): the agent is
// asked at most once per period whoever calls.
var agentDataTTLs = map[string]time.Duration{
	"guest-get-load":               20 * time.Second,
	"guest-get-cpustats":           20 * time.Second,
	"guest-get-diskstats":          20 * time.Second,
	"guest-get-time":               time.Minute,
	"guest-get-vcpus":              time.Minute,
	"guest-get-memory-block-info":  time.Minute,
	"guest-get-users":              time.Minute,
	"guest-get-osinfo":             5 * time.Minute,
	"guest-get-disks":              5 * time.Minute,
	"guest-get-host-name":          5 * time.Minute,
	"guest-get-timezone":           5 * time.Minute,
	"guest-network-get-route":      5 * time.Minute,
	"guest-network-get-interfaces": 5 * time.Minute,
	"guest-get-memory-blocks":      30 * time.Minute,
}

// agentDataTimeout bounds one agent command of AgentData, whatever the
// caller's deadline (libvirt's own agent timeout is 5 s).
const agentDataTimeout = 10 * time.Second

// newAgentData makes the caches of AgentData, one per command.
func (src *statsSource) newAgentData() map[string]*statsCache[string] {
	caches := make(map[string]*statsCache[string], len(agentDataTTLs))
	for cmd, ttl := range agentDataTTLs {
		c := newStatsCache(func(ctx context.Context) (string, error) {
			ctx, cancel := context.WithTimeout(ctx, agentDataTimeout)
			defer cancel()
			return src.agentCommand(ctx, `{"execute":"`+cmd+`"}`)
		})
		c.maxAge = ttl
		caches[cmd] = c
	}
	return caches
}

// AgentData is the guest agent's raw JSON reply to command (one of
// KubeVirt's VMStats commands), at most its period old.
func (m *Manager) AgentData(ctx context.Context, command string) (string, error) {
	c, ok := m.stats.agentData[command]
	if !ok {
		return "", fmt.Errorf("cache not found for data key: %s", command)
	}
	data, err := c.get(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("failed to get agent data for %s: %w", command, err)
	}
	return data, nil
}
