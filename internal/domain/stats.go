package domain

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// Stats is KubeVirt's stats.DomainStats (pkg/virt-launcher/virtwrap/stats)
// as JSON: Go field names as keys, in its order, with a ...Set flag next to
// each value (kubevirt-wire.md section 7). KubeVirt's launcher fills it
// from libvirt's bulk stats, virDomainMemoryStats and the vCPU pinning;
// here the bulk stats' balloon group stands in for virDomainMemoryStats
// (libvirt fills both from the same QEMU query), which saves a round trip.
type Stats struct {
	Name   string
	UUID   string
	Cpu    *StatsCPU //nolint:revive // KubeVirt's key.
	Memory *StatsMemory
	// MigrateDomainJobInfo is the running migration's progress, zero
	// when none runs; never null: virt-handler's migration metrics
	// dereference it while a migration runs (a null one crashed
	// virt-handler v1.8.2, seen in the two-node e2e), and KubeVirt's
	// launcher always sends one.
	MigrateDomainJobInfo *StatsJobInfo
	Vcpu                 []StatsVcpu
	Net                  []StatsNet
	Block                []StatsBlock
	CPUMapSet            bool
	CPUMap               [][]bool
	DirtyRate            *StatsDirtyRate
	// Load is the guest agent's load average, never null: KubeVirt's
	// launcher always sends its agent store's, with the ...Set flags
	// false until the agent reported one.
	Load *StatsLoad
}

// StatsLoad is DomainStatsLoad.
type StatsLoad struct {
	Load1mSet  bool
	Load1m     float64
	Load5mSet  bool
	Load5m     float64
	Load15mSet bool
	Load15m    float64
}

// statsLoad is the agent's load average as StatsLoad (all unset when
// there is none).
func statsLoad(l agent.Load, ok bool) *StatsLoad {
	if !ok {
		return &StatsLoad{}
	}
	return &StatsLoad{Load1mSet: true, Load1m: l.Load1m, Load5mSet: true, Load5m: l.Load5m, Load15mSet: true, Load15m: l.Load15m}
}

// StatsJobInfo is KubeVirt's DomainJobInfo: a migration job's progress
// from libvirt's job statistics, as KubeVirt's launcher converts them
// (the dirty rate in bytes: pages times the page size).
type StatsJobInfo struct {
	DataTotalSet     bool
	DataTotal        uint64
	DataProcessedSet bool
	DataProcessed    uint64
	MemoryBpsSet     bool
	MemoryBps        uint64
	DataRemainingSet bool
	DataRemaining    uint64
	MemDirtyRateSet  bool
	MemDirtyRate     uint64
}

// jobInfoFromParams converts virDomainGetJobStats' parameters.
func jobInfoFromParams(params []libvirt.TypedParam) StatsJobInfo {
	var j StatsJobInfo
	var rate, page uint64
	var rateSet, pageSet bool
	for _, p := range params {
		v, ok := paramUint(p)
		if !ok {
			continue
		}
		switch p.Field {
		case libvirt.DomainJobDataTotal:
			j.DataTotal, j.DataTotalSet = v, true
		case libvirt.DomainJobDataProcessed:
			j.DataProcessed, j.DataProcessedSet = v, true
		case libvirt.DomainJobMemoryBps:
			j.MemoryBps, j.MemoryBpsSet = v, true
		case libvirt.DomainJobDataRemaining:
			j.DataRemaining, j.DataRemainingSet = v, true
		case libvirt.DomainJobMemoryDirtyRate:
			rate, rateSet = v, true
		case libvirt.DomainJobMemoryPageSize:
			page, pageSet = v, true
		}
	}
	if rateSet && pageSet {
		j.MemDirtyRate, j.MemDirtyRateSet = rate*page, true
	}
	return j
}

// StatsCPU is DomainStatsCPU.
type StatsCPU struct {
	TimeSet   bool
	Time      uint64
	UserSet   bool
	User      uint64
	SystemSet bool
	System    uint64
}

// StatsMemory is DomainStatsMemory.
type StatsMemory struct {
	UnusedSet        bool
	Unused           uint64
	CachedSet        bool
	Cached           uint64
	AvailableSet     bool
	Available        uint64
	ActualBalloonSet bool
	ActualBalloon    uint64
	RSSSet           bool
	RSS              uint64
	SwapInSet        bool
	SwapIn           uint64
	SwapOutSet       bool
	SwapOut          uint64
	MajorFaultSet    bool
	MajorFault       uint64
	MinorFaultSet    bool
	MinorFault       uint64
	UsableSet        bool
	Usable           uint64
	TotalSet         bool
	Total            uint64
}

// StatsVcpu is DomainStatsVcpu.
type StatsVcpu struct {
	StateSet bool
	State    int
	TimeSet  bool
	Time     uint64
	WaitSet  bool
	Wait     uint64
	DelaySet bool
	Delay    uint64
}

// StatsNet is DomainStatsNet.
type StatsNet struct {
	NameSet    bool
	Name       string
	AliasSet   bool
	Alias      string
	RxBytesSet bool
	RxBytes    uint64
	RxPktsSet  bool
	RxPkts     uint64
	RxErrsSet  bool
	RxErrs     uint64
	RxDropSet  bool
	RxDrop     uint64
	TxBytesSet bool
	TxBytes    uint64
	TxPktsSet  bool
	TxPkts     uint64
	TxErrsSet  bool
	TxErrs     uint64
	TxDropSet  bool
	TxDrop     uint64
}

// StatsBlock is DomainStatsBlock.
type StatsBlock struct {
	NameSet         bool
	Name            string
	Alias           string
	BackingIndexSet bool
	BackingIndex    uint
	PathSet         bool
	Path            string
	RdReqsSet       bool
	RdReqs          uint64
	RdBytesSet      bool
	RdBytes         uint64
	RdTimesSet      bool
	RdTimes         uint64
	WrReqsSet       bool
	WrReqs          uint64
	WrBytesSet      bool
	WrBytes         uint64
	WrTimesSet      bool
	WrTimes         uint64
	FlReqsSet       bool
	FlReqs          uint64
	FlTimesSet      bool
	FlTimes         uint64
	ErrorsSet       bool
	Errors          uint64
	AllocationSet   bool
	Allocation      uint64
	CapacitySet     bool
	Capacity        uint64
	PhysicalSet     bool
	Physical        uint64
}

// StatsDirtyRate is DomainStatsDirtyRate.
type StatsDirtyRate struct {
	CalcStatusSet         bool
	CalcStatus            int
	CalcStartTimeSet      bool
	CalcStartTime         int64
	CalcPeriodSet         bool
	CalcPeriod            int
	MegabytesPerSecondSet bool
	MegabytesPerSecond    int64
}

// statsTypes and statsFlags are KubeVirt's request (manager.go
// getDomainStats): running or paused domains only, and NOWAIT, so that a
// long job (a start, a shutdown) does not hold the call; the groups that
// need the job are then left out of that one answer.
const (
	statsTypes = libvirt.DomainStatsBalloon | libvirt.DomainStatsCPUTotal | libvirt.DomainStatsVCPU |
		libvirt.DomainStatsInterface | libvirt.DomainStatsBlock | libvirt.DomainStatsDirtyrate
	statsFlags = libvirt.ConnectGetAllDomainsStatsRunning | libvirt.ConnectGetAllDomainsStatsPaused |
		libvirt.ConnectGetAllDomainsStatsNowait
)

// ErrNoStats is DomainStats' error when no domain is running or paused:
// KubeVirt's launcher then fails the call too ("empty DomainStats").
var ErrNoStats = errors.New("empty DomainStats: no running or paused domain")

// vcpuPinning reads the affinity of the first n vCPUs over hostCPUs host
// CPUs, as libvirt-go's Domain.GetVcpuPinInfo(DOMAIN_AFFECT_CURRENT) does.
func vcpuPinning(l *libvirt.Libvirt, d libvirt.Domain, n, hostCPUs int) ([][]bool, error) {
	if n <= 0 || hostCPUs <= 0 {
		return [][]bool{}, nil
	}
	maplen := (hostCPUs + 7) / 8
	raw, _, err := l.DomainGetVcpuPinInfo(d, int32(n), int32(maplen), uint32(libvirt.DomainAffectCurrent))
	if err != nil {
		return nil, err
	}
	return cpuMap(raw, n, hostCPUs), nil
}

// cpuMap unpacks libvirt's per-vCPU bitmaps (maplen bytes each, host CPU j
// at bit j%8 of byte j/8) into rows of n vCPUs by hostCPUs columns.
func cpuMap(raw []byte, n, hostCPUs int) [][]bool {
	maplen := (hostCPUs + 7) / 8
	out := make([][]bool, n)
	for i := range out {
		out[i] = make([]bool, hostCPUs)
		for j := 0; j < hostCPUs; j++ {
			if b := i*maplen + j/8; b < len(raw) && raw[b]&(1<<(j%8)) != 0 {
				out[i][j] = true
			}
		}
	}
	return out
}

// deviceAliases maps the target device of each disk and interface (vda,
// tap0) to its alias without the "ua-" prefix, i.e. the VMI's disk or
// interface name: KubeVirt's refreshDeviceAliasMap, read here from the
// cached Domain object, which every lifecycle event and Sync refreshes.
func deviceAliases(dom *domainjson.Domain) map[string]string {
	out := map[string]string{}
	if dom == nil {
		return out
	}
	for _, iface := range dom.Spec.Devices.Interfaces {
		if iface.Target != nil && iface.Target.Device != "" && iface.Alias != nil {
			out[iface.Target.Device] = iface.Alias.Name
		}
	}
	for _, disk := range dom.Spec.Devices.Disks {
		if disk.Target.Device != "" && disk.Alias != nil {
			out[disk.Target.Device] = disk.Alias.Name
		}
	}
	return out
}

// hasBalloon tells whether the domain has a working balloon device: only
// then does virDomainMemoryStats report the actual balloon size.
func hasBalloon(dom *domainjson.Domain) bool {
	if dom == nil {
		return false
	}
	b := dom.Spec.Devices.Ballooning
	return b != nil && b.Model != "none"
}

func formatUUID(u libvirt.UUID) string {
	b := u[:]
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func paramUint(p libvirt.TypedParam) (uint64, bool) {
	switch v := p.Value.I.(type) {
	case int32:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case int64:
		return uint64(v), true
	case uint64:
		return v, true
	}
	return 0, false
}

// vcpuCurrent is the params' vcpu.current (the vCPUs plugged in now).
func vcpuCurrent(params []libvirt.TypedParam) int {
	for _, p := range params {
		if p.Field == "vcpu.current" {
			n, _ := paramUint(p)
			return int(min(n, 4096))
		}
	}
	return 0
}

// statsFromParams converts one bulk stats record the way libvirt-go's
// GetAllDomainStats and KubeVirt's statsconv do: Vcpu has vcpu.maximum
// entries (vcpu.current without a maximum), an entry libvirt reports
// nothing for being an offline vCPU (StateSet, State 0); Net and Block have
// net.count and block.count entries. aliases maps target devices to the
// VMI's names (Net[].Alias, Block[].Alias); balloon says whether the domain
// has a balloon device. Cpu, Memory, DirtyRate and Load are never nil.
func statsFromParams(params []libvirt.TypedParam, aliases map[string]string, balloon bool) *Stats {
	s := &Stats{Cpu: &StatsCPU{}, Memory: &StatsMemory{}, DirtyRate: &StatsDirtyRate{}, MigrateDomainJobInfo: &StatsJobInfo{}, Load: &StatsLoad{}}
	byField := make(map[string]libvirt.TypedParam, len(params))
	for _, p := range params {
		byField[p.Field] = p
	}
	num := func(field string, dst *uint64, set *bool) bool {
		p, ok := byField[field]
		if !ok {
			return false
		}
		n, isNum := paramUint(p)
		if isNum {
			*dst, *set = n, true
		}
		return isNum
	}
	str := func(field string, dst *string, set *bool) bool {
		p, ok := byField[field]
		if !ok {
			return false
		}
		v, isStr := p.Value.I.(string)
		if isStr {
			*dst, *set = v, true
		}
		return isStr
	}
	count := func(field string) int {
		var n uint64
		var set bool
		num(field, &n, &set)
		return int(min(n, 4096)) // bound what a daemon can make us allocate
	}

	c := s.Cpu
	num("cpu.time", &c.Time, &c.TimeSet)
	num("cpu.user", &c.User, &c.UserSet)
	num("cpu.system", &c.System, &c.SystemSet)

	mem := s.Memory
	num("balloon.current", &mem.Total, &mem.TotalSet)
	if balloon {
		num("balloon.current", &mem.ActualBalloon, &mem.ActualBalloonSet)
	}
	num("balloon.unused", &mem.Unused, &mem.UnusedSet)
	num("balloon.disk_caches", &mem.Cached, &mem.CachedSet)
	num("balloon.available", &mem.Available, &mem.AvailableSet)
	num("balloon.rss", &mem.RSS, &mem.RSSSet)
	num("balloon.swap_in", &mem.SwapIn, &mem.SwapInSet)
	num("balloon.swap_out", &mem.SwapOut, &mem.SwapOutSet)
	num("balloon.major_fault", &mem.MajorFault, &mem.MajorFaultSet)
	num("balloon.minor_fault", &mem.MinorFault, &mem.MinorFaultSet)
	num("balloon.usable", &mem.Usable, &mem.UsableSet)

	nvcpu := count("vcpu.maximum")
	if _, ok := byField["vcpu.maximum"]; !ok {
		nvcpu = count("vcpu.current")
	}
	s.Vcpu = make([]StatsVcpu, nvcpu)
	for i := range s.Vcpu {
		v := &s.Vcpu[i]
		pre := "vcpu." + strconv.Itoa(i) + "."
		var state uint64
		found := num(pre+"state", &state, &v.StateSet)
		v.State = int(state)
		found = num(pre+"time", &v.Time, &v.TimeSet) || found
		found = num(pre+"wait", &v.Wait, &v.WaitSet) || found
		found = num(pre+"delay", &v.Delay, &v.DelaySet) || found
		if _, halted := byField[pre+"halted"]; !found && !halted {
			v.StateSet, v.State = true, 0 // VIR_VCPU_OFFLINE
		}
	}

	s.Net = make([]StatsNet, count("net.count"))
	for i := range s.Net {
		n := &s.Net[i]
		pre := "net." + strconv.Itoa(i) + "."
		str(pre+"name", &n.Name, &n.NameSet)
		num(pre+"rx.bytes", &n.RxBytes, &n.RxBytesSet)
		num(pre+"rx.pkts", &n.RxPkts, &n.RxPktsSet)
		num(pre+"rx.errs", &n.RxErrs, &n.RxErrsSet)
		num(pre+"rx.drop", &n.RxDrop, &n.RxDropSet)
		num(pre+"tx.bytes", &n.TxBytes, &n.TxBytesSet)
		num(pre+"tx.pkts", &n.TxPkts, &n.TxPktsSet)
		num(pre+"tx.errs", &n.TxErrs, &n.TxErrsSet)
		num(pre+"tx.drop", &n.TxDrop, &n.TxDropSet)
		if a, ok := aliases[n.Name]; ok && n.NameSet {
			n.Alias, n.AliasSet = a, true
		}
	}

	s.Block = make([]StatsBlock, count("block.count"))
	for i := range s.Block {
		b := &s.Block[i]
		pre := "block." + strconv.Itoa(i) + "."
		str(pre+"name", &b.Name, &b.NameSet)
		var backing uint64
		num(pre+"backingIndex", &backing, &b.BackingIndexSet)
		b.BackingIndex = uint(backing)
		str(pre+"path", &b.Path, &b.PathSet)
		num(pre+"rd.reqs", &b.RdReqs, &b.RdReqsSet)
		num(pre+"rd.bytes", &b.RdBytes, &b.RdBytesSet)
		num(pre+"rd.times", &b.RdTimes, &b.RdTimesSet)
		num(pre+"wr.reqs", &b.WrReqs, &b.WrReqsSet)
		num(pre+"wr.bytes", &b.WrBytes, &b.WrBytesSet)
		num(pre+"wr.times", &b.WrTimes, &b.WrTimesSet)
		num(pre+"fl.reqs", &b.FlReqs, &b.FlReqsSet)
		num(pre+"fl.times", &b.FlTimes, &b.FlTimesSet)
		num(pre+"errors", &b.Errors, &b.ErrorsSet)
		num(pre+"allocation", &b.Allocation, &b.AllocationSet)
		num(pre+"capacity", &b.Capacity, &b.CapacitySet)
		num(pre+"physical", &b.Physical, &b.PhysicalSet)
		if a, ok := aliases[b.Name]; ok && b.NameSet {
			b.Alias = a // KubeVirt has no AliasSet for blocks
		}
	}

	*s.DirtyRate = dirtyRateFromParams(params)
	return s
}
