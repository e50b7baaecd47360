package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// statsSource answers the stats calls: GetDomainStats (stats.go's
// conversion of libvirt's bulk stats, kept in statscache.go's cache), the
// dirty rate (dirtyrate.go) and GetVMStats' agent answers (agentdata.go).
// It reads the domain through the manager's functions below and keeps
// only what the stats need of their own: the host CPU count and the
// running migration's progress.
type statsSource struct {
	log *slog.Logger
	// lookup finds the domain, waiting for a connection until ctx ends
	// (ok=false: there is none); cached is the Domain object last read;
	// runCtx is the lifetime of the background refresher.
	lookup func(ctx context.Context) (*libvirt.Libvirt, libvirt.Domain, bool, error)
	cached func() *domainjson.Domain
	runCtx func() context.Context
	// agent is what the guest agent last reported (the load average);
	// agentCommand asks the agent through the daemon.
	agent        *agent.Store
	agentCommand func(ctx context.Context, command string) (string, error)

	// cache is the GetDomainStats answer, dirtyRate the dirty rate's,
	// agentData GetVMStats' agent answers by command.
	cache     *statsCache[[]byte]
	dirtyRate *statsCache[StatsDirtyRate]
	agentData map[string]*statsCache[string]

	mu sync.Mutex
	// hostCPUs is the daemon's host CPU count, read on hostCPUsConn.
	hostCPUsConn *libvirt.Libvirt
	hostCPUs     int
	// jobInfo is the running migration's progress as the monitor last
	// read it (zero when no migration runs).
	jobInfo StatsJobInfo
}

// newStatsSource makes the stats' caches over src's functions.
func newStatsSource(src *statsSource) *statsSource {
	src.cache = newStatsCache(src.fetch)
	src.dirtyRate = newStatsCache(src.measureDirtyRate)
	src.dirtyRate.maxAge = dirtyRateMaxAge
	src.agentData = src.newAgentData()
	return src
}

// setJobInfo records the running migration's progress (zero: none runs).
func (src *statsSource) setJobInfo(info StatsJobInfo) {
	src.mu.Lock()
	src.jobInfo = info
	src.mu.Unlock()
}

// drop forgets the GetDomainStats answer: the domain changed.
func (src *statsSource) drop() { src.cache.drop() }

// DomainStats returns the stats JSON of the running (or paused) domain,
// at most statsMaxAge old (statscache.go).
func (m *Manager) DomainStats(ctx context.Context) ([]byte, error) {
	return m.stats.domainStats(ctx)
}

func (src *statsSource) domainStats(ctx context.Context) ([]byte, error) {
	return src.cache.get(ctx, src.runCtx())
}

// fetchStats reads the stats of the running (or paused) domain from
// libvirt.
func (src *statsSource) fetch(ctx context.Context) ([]byte, error) {
	l, d, ok, err := src.lookup(ctx)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNoStats
	}
	var s *Stats
	err = bounded.Call(ctx, "stats of domain "+d.Name, func() error {
		recs, err := l.ConnectGetAllDomainStats([]libvirt.Domain{d}, uint32(statsTypes), uint32(statsFlags))
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			return ErrNoStats
		}
		dom := src.cached()
		src.mu.Lock()
		job := src.jobInfo
		src.mu.Unlock()
		s = statsFromParams(recs[0].Params, deviceAliases(dom), hasBalloon(dom))
		*s.MigrateDomainJobInfo = job
		s.Load = statsLoad(src.agent.Load())
		// KubeVirt's launcher adds the vCPU pinning (libvirt-go's
		// GetVcpuPinInfo): one row per current vCPU, one column per host
		// CPU; a failure fails the whole call there too.
		hostCPUs, err := src.hostCPUCount(l)
		if err != nil {
			return err
		}
		s.CPUMap, err = vcpuPinning(l, d, vcpuCurrent(recs[0].Params), hostCPUs)
		if err != nil {
			return fmt.Errorf("vCPU pinning: %w", err)
		}
		s.CPUMapSet = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.Name = d.Name
	s.UUID = formatUUID(d.UUID)
	return json.Marshal(s)
}

// hostCPUCount is libvirt-go's host CPU count for GetVcpuPinInfo: nodes x
// sockets x cores x threads of virNodeGetInfo. It is read once per
// connection (a daemon restart may come with a CPU hotplug): it does not
// change, and asking costs half a millisecond of each stats call.
func (src *statsSource) hostCPUCount(l *libvirt.Libvirt) (int, error) {
	src.mu.Lock()
	if src.hostCPUsConn == l {
		n := src.hostCPUs
		src.mu.Unlock()
		return n, nil
	}
	src.mu.Unlock()
	_, _, _, _, nodes, sockets, cores, threads, err := l.NodeGetInfo()
	if err != nil {
		return 0, fmt.Errorf("host CPU topology: %w", err)
	}
	n := int(nodes * sockets * cores * threads)
	src.mu.Lock()
	src.hostCPUsConn, src.hostCPUs = l, n
	src.mu.Unlock()
	return n, nil
}
