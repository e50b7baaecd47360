package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// Stats is KubeVirt's DomainStats as JSON: Go field names as keys, and a
// ...Set flag next to each value (kubevirt-wire.md section 7 lists the top
// level keys). Only what libvirt's bulk stats report is filled in.
type Stats struct {
	Name      string
	UUID      string
	Cpu       *StatsCPU //nolint:revive // KubeVirt's key.
	Memory    *StatsMemory
	Vcpu      []StatsVcpu
	Net       []StatsNet
	Block     []StatsBlock
	NrVirtCpu uint //nolint:revive // KubeVirt's key.
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
	NameSet       bool
	Name          string
	Alias         string
	PathSet       bool
	Path          string
	RdReqsSet     bool
	RdReqs        uint64
	RdBytesSet    bool
	RdBytes       uint64
	RdTimesSet    bool
	RdTimes       uint64
	WrReqsSet     bool
	WrReqs        uint64
	WrBytesSet    bool
	WrBytes       uint64
	WrTimesSet    bool
	WrTimes       uint64
	FlReqsSet     bool
	FlReqs        uint64
	FlTimesSet    bool
	FlTimes       uint64
	ErrorsSet     bool
	Errors        uint64
	AllocationSet bool
	Allocation    uint64
	CapacitySet   bool
	Capacity      uint64
	PhysicalSet   bool
	Physical      uint64
}

// DomainStats returns the stats JSON of the running domain; nil when no
// domain is defined.
func (m *Manager) DomainStats(ctx context.Context) ([]byte, error) {
	l, d, ok, err := m.lookup(ctx)
	if err != nil || !ok {
		return nil, err
	}
	types := libvirt.DomainStatsState | libvirt.DomainStatsCPUTotal | libvirt.DomainStatsBalloon |
		libvirt.DomainStatsVCPU | libvirt.DomainStatsInterface | libvirt.DomainStatsBlock
	recs, err := l.ConnectGetAllDomainStats([]libvirt.Domain{d}, uint32(types), 0)
	if err != nil {
		return nil, fmt.Errorf("stats of domain %s: %w", d.Name, err)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	s := statsFromParams(recs[0].Params)
	s.Name = d.Name
	s.UUID = formatUUID(d.UUID)
	return json.Marshal(s)
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

func statsFromParams(params []libvirt.TypedParam) *Stats {
	s := &Stats{}
	vcpus := map[int]*StatsVcpu{}
	nets := map[int]*StatsNet{}
	blocks := map[int]*StatsBlock{}
	for _, p := range params {
		n, isNum := paramUint(p)
		str, _ := p.Value.I.(string)
		set := func(dst *uint64, flag *bool) {
			if isNum {
				*dst, *flag = n, true
			}
		}
		f := p.Field
		switch {
		case strings.HasPrefix(f, "cpu."):
			if s.Cpu == nil {
				s.Cpu = &StatsCPU{}
			}
			switch f {
			case "cpu.time":
				set(&s.Cpu.Time, &s.Cpu.TimeSet)
			case "cpu.user":
				set(&s.Cpu.User, &s.Cpu.UserSet)
			case "cpu.system":
				set(&s.Cpu.System, &s.Cpu.SystemSet)
			}
		case strings.HasPrefix(f, "balloon."):
			if s.Memory == nil {
				s.Memory = &StatsMemory{}
			}
			mem := s.Memory
			switch f {
			case libvirt.DomainStatsBalloonCurrent:
				set(&mem.ActualBalloon, &mem.ActualBalloonSet)
			case libvirt.DomainStatsBalloonMaximum:
				set(&mem.Total, &mem.TotalSet)
			case libvirt.DomainStatsBalloonUnused:
				set(&mem.Unused, &mem.UnusedSet)
			case libvirt.DomainStatsBalloonAvailable:
				set(&mem.Available, &mem.AvailableSet)
			case libvirt.DomainStatsBalloonRss:
				set(&mem.RSS, &mem.RSSSet)
			case libvirt.DomainStatsBalloonSwapIn:
				set(&mem.SwapIn, &mem.SwapInSet)
			case libvirt.DomainStatsBalloonSwapOut:
				set(&mem.SwapOut, &mem.SwapOutSet)
			case libvirt.DomainStatsBalloonMajorFault:
				set(&mem.MajorFault, &mem.MajorFaultSet)
			case libvirt.DomainStatsBalloonMinorFault:
				set(&mem.MinorFault, &mem.MinorFaultSet)
			case libvirt.DomainStatsBalloonUsable:
				set(&mem.Usable, &mem.UsableSet)
			}
		case f == "vcpu.current":
			s.NrVirtCpu = uint(n)
		case strings.HasPrefix(f, "vcpu."):
			i, rest, ok := indexed(f, "vcpu.")
			if !ok {
				continue
			}
			v := vcpus[i]
			if v == nil {
				v = &StatsVcpu{}
				vcpus[i] = v
			}
			switch rest {
			case "state":
				v.State, v.StateSet = int(n), isNum
			case "time":
				set(&v.Time, &v.TimeSet)
			case "wait":
				set(&v.Wait, &v.WaitSet)
			case "delay":
				set(&v.Delay, &v.DelaySet)
			}
		case strings.HasPrefix(f, "net."):
			i, rest, ok := indexed(f, "net.")
			if !ok {
				continue
			}
			v := nets[i]
			if v == nil {
				v = &StatsNet{}
				nets[i] = v
			}
			switch rest {
			case "name":
				v.Name, v.NameSet = str, true
			case "rx.bytes":
				set(&v.RxBytes, &v.RxBytesSet)
			case "rx.pkts":
				set(&v.RxPkts, &v.RxPktsSet)
			case "rx.errs":
				set(&v.RxErrs, &v.RxErrsSet)
			case "rx.drop":
				set(&v.RxDrop, &v.RxDropSet)
			case "tx.bytes":
				set(&v.TxBytes, &v.TxBytesSet)
			case "tx.pkts":
				set(&v.TxPkts, &v.TxPktsSet)
			case "tx.errs":
				set(&v.TxErrs, &v.TxErrsSet)
			case "tx.drop":
				set(&v.TxDrop, &v.TxDropSet)
			}
		case strings.HasPrefix(f, "block."):
			i, rest, ok := indexed(f, "block.")
			if !ok {
				continue
			}
			v := blocks[i]
			if v == nil {
				v = &StatsBlock{}
				blocks[i] = v
			}
			switch rest {
			case "name":
				v.Name, v.NameSet = str, true
			case "path":
				v.Path, v.PathSet = str, true
			case "rd.reqs":
				set(&v.RdReqs, &v.RdReqsSet)
			case "rd.bytes":
				set(&v.RdBytes, &v.RdBytesSet)
			case "rd.times":
				set(&v.RdTimes, &v.RdTimesSet)
			case "wr.reqs":
				set(&v.WrReqs, &v.WrReqsSet)
			case "wr.bytes":
				set(&v.WrBytes, &v.WrBytesSet)
			case "wr.times":
				set(&v.WrTimes, &v.WrTimesSet)
			case "fl.reqs":
				set(&v.FlReqs, &v.FlReqsSet)
			case "fl.times":
				set(&v.FlTimes, &v.FlTimesSet)
			case "errors":
				set(&v.Errors, &v.ErrorsSet)
			case "allocation":
				set(&v.Allocation, &v.AllocationSet)
			case "capacity":
				set(&v.Capacity, &v.CapacitySet)
			case "physical":
				set(&v.Physical, &v.PhysicalSet)
			}
		}
	}
	s.Vcpu = collect(vcpus)
	s.Net = collect(nets)
	s.Block = collect(blocks)
	return s
}

// indexed splits "net.3.rx.bytes" into 3 and "rx.bytes".
func indexed(field, prefix string) (int, string, bool) {
	idx, rest, ok := strings.Cut(strings.TrimPrefix(field, prefix), ".")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i > 4096 {
		return 0, "", false
	}
	return i, rest, true
}

func collect[T any](m map[int]*T) []T {
	out := make([]T, 0, len(m))
	for i := 0; len(out) < len(m) && i <= 4096; i++ {
		if v, ok := m[i]; ok {
			out = append(out, *v)
		}
	}
	return out
}
