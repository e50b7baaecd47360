package domain

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

func tp(field string, v any) libvirt.TypedParam {
	return libvirt.TypedParam{Field: field, Value: libvirt.TypedParamValue{I: v}}
}

// liveXML is a running domain as libvirt reports it: user aliases with
// the "ua-" prefix, targets filled in.
const liveXML = `<domain type="qemu"><name>ns_vm</name>
<vcpu placement="static" current="2">4</vcpu>
<devices>
  <disk type="file" device="disk"><source file="/d/root.qcow2"/><target dev="vda" bus="virtio"/><alias name="ua-root"/></disk>
  <disk type="file" device="disk"><source file="/d/scratch.qcow2"/><target dev="vdb" bus="virtio"/><alias name="ua-scratch"/></disk>
  <disk type="file" device="cdrom"><source file="/d/x.iso"/><target dev="sda" bus="sata"/><alias name="sata0-0-0"/></disk>
  <interface type="ethernet"><target dev="tap0" managed="no"/><alias name="ua-default"/></interface>
  <interface type="ethernet"><alias name="ua-notarget"/></interface>
  <memballoon model="virtio"><alias name="balloon0"/></memballoon>
</devices></domain>`

func liveDomain(t *testing.T, xml string) *domainjson.Domain {
	t.Helper()
	var spec libvirtxml.Domain
	if err := spec.Unmarshal(xml); err != nil {
		t.Fatal(err)
	}
	return domainjson.Build("vm", "ns", &spec, libvirt.DomainRunning, 1, domainjson.Metadata{})
}

func TestDeviceAliases(t *testing.T) {
	got := deviceAliases(liveDomain(t, liveXML))
	want := map[string]string{"vda": "root", "vdb": "scratch", "sda": "sata0-0-0", "tap0": "default"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("aliases %v, want %v", got, want)
	}
	if len(deviceAliases(nil)) != 0 {
		t.Error("aliases of no domain")
	}
	if !hasBalloon(liveDomain(t, liveXML)) {
		t.Error("virtio balloon not seen")
	}
	if hasBalloon(liveDomain(t, strings.Replace(liveXML, `model="virtio"`, `model="none"`, 1))) || hasBalloon(nil) {
		t.Error("balloon model none seen as a balloon")
	}
}

// A record as libvirt 9.0 sends it for <vcpu current="2">4</vcpu>, two
// disks and a NIC, converted as KubeVirt's launcher does.
func TestStatsFromParams(t *testing.T) {
	params := []libvirt.TypedParam{
		tp("cpu.time", uint64(1000)), tp("cpu.user", uint64(10)),
		tp("balloon.current", uint64(131072)), tp("balloon.maximum", uint64(262144)),
		tp("balloon.rss", uint64(9000)), tp("balloon.disk_caches", uint64(77)), tp("balloon.last-update", uint64(5)),
		tp("vcpu.current", uint32(2)), tp("vcpu.maximum", uint32(4)),
		tp("vcpu.0.state", int32(1)), tp("vcpu.0.time", uint64(6)), tp("vcpu.0.delay", uint64(3)),
		tp("vcpu.1.state", int32(2)), tp("vcpu.1.time", uint64(7)), tp("vcpu.1.wait", uint64(0)),
		tp("net.count", uint32(1)), tp("net.0.name", "tap0"), tp("net.0.rx.bytes", uint64(42)),
		tp("block.count", uint32(3)),
		tp("block.0.name", "vda"), tp("block.0.path", "/d/root.qcow2"), tp("block.0.wr.bytes", uint64(512)),
		tp("block.0.backingIndex", uint32(1)), tp("block.0.capacity", uint64(1<<25)),
		tp("block.1.name", "vdb"),
		tp("block.2.name", "vdz"), // no alias known
		tp("block.x.name", "bad"), tp("net.9.name", "beyond-count"),
		tp("dirtyrate.calc_status", int32(0)), tp("dirtyrate.calc_start_time", int64(-1)), tp("dirtyrate.calc_period", int32(0)),
	}
	dom := liveDomain(t, liveXML)
	s := statsFromParams(params, deviceAliases(dom), hasBalloon(dom))

	if *s.Cpu != (StatsCPU{TimeSet: true, Time: 1000, UserSet: true, User: 10}) {
		t.Errorf("cpu %+v", s.Cpu)
	}
	wantMem := StatsMemory{TotalSet: true, Total: 131072, ActualBalloonSet: true, ActualBalloon: 131072,
		RSSSet: true, RSS: 9000, CachedSet: true, Cached: 77}
	if *s.Memory != wantMem {
		t.Errorf("memory %+v, want %+v", *s.Memory, wantMem)
	}
	wantVcpu := []StatsVcpu{
		{StateSet: true, State: 1, TimeSet: true, Time: 6, DelaySet: true, Delay: 3},
		{StateSet: true, State: 2, TimeSet: true, Time: 7, WaitSet: true},
		{StateSet: true}, {StateSet: true}, // offline: the maximum counts
	}
	if !reflect.DeepEqual(s.Vcpu, wantVcpu) {
		t.Errorf("vcpu %+v, want %+v", s.Vcpu, wantVcpu)
	}
	if len(s.Net) != 1 || s.Net[0] != (StatsNet{NameSet: true, Name: "tap0", AliasSet: true, Alias: "default", RxBytesSet: true, RxBytes: 42}) {
		t.Errorf("net %+v", s.Net)
	}
	if len(s.Block) != 3 {
		t.Fatalf("block %+v", s.Block)
	}
	b0 := s.Block[0]
	if b0.Name != "vda" || b0.Alias != "root" || b0.Path != "/d/root.qcow2" || b0.WrBytes != 512 || !b0.WrBytesSet ||
		!b0.BackingIndexSet || b0.BackingIndex != 1 || b0.Capacity != 1<<25 || b0.RdBytesSet {
		t.Errorf("block 0 %+v", b0)
	}
	if s.Block[1].Alias != "scratch" || s.Block[2].Alias != "" || !s.Block[2].NameSet {
		t.Errorf("block aliases %q %q", s.Block[1].Alias, s.Block[2].Alias)
	}
	if *s.DirtyRate != (StatsDirtyRate{CalcStatusSet: true, CalcStartTimeSet: true, CalcStartTime: -1, CalcPeriodSet: true}) {
		t.Errorf("dirty rate %+v", s.DirtyRate)
	}

	// Without a balloon device virDomainMemoryStats has no actual balloon.
	if m := statsFromParams(params, nil, false).Memory; m.ActualBalloonSet || !m.TotalSet {
		t.Errorf("memory without balloon %+v", m)
	}
	// Only vcpu.current: that many entries.
	if v := statsFromParams([]libvirt.TypedParam{tp("vcpu.current", uint32(3))}, nil, false).Vcpu; len(v) != 3 {
		t.Errorf("vcpu with current only: %+v", v)
	}
}

// The JSON has exactly KubeVirt's top-level keys, Cpu, Memory and
// DirtyRate as objects and the lists as arrays even when empty, as
// KubeVirt's converter makes them.
func TestStatsJSONShape(t *testing.T) {
	s := statsFromParams(nil, nil, false)
	s.Name, s.UUID = "ns_vm", "u"
	s.CPUMap, s.CPUMapSet = cpuMap([]byte{0x05}, 1, 3), true
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"Block", "CPUMap", "CPUMapSet", "Cpu", "DirtyRate", "Load", "Memory", "MigrateDomainJobInfo", "Name", "Net", "UUID", "Vcpu"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	for k, v := range map[string]string{"Vcpu": "[]", "Net": "[]", "Block": "[]",
		"Load":   `{"Load1mSet":false,"Load1m":0,"Load5mSet":false,"Load5m":0,"Load15mSet":false,"Load15m":0}`,
		"CPUMap": "[[true,false,true]]", "CPUMapSet": "true"} {
		if string(top[k]) != v {
			t.Errorf("%s = %s, want %s", k, top[k], v)
		}
	}
	// MigrateDomainJobInfo never null: virt-handler dereferences it.
	for _, k := range []string{"Cpu", "Memory", "DirtyRate", "MigrateDomainJobInfo"} {
		if !strings.HasPrefix(string(top[k]), "{") {
			t.Errorf("%s = %s, want an object", k, top[k])
		}
	}
}

func TestCPUMap(t *testing.T) {
	tests := []struct {
		name     string
		raw      []byte
		n, hosts int
		want     [][]bool
	}{
		{"one vCPU on host CPUs 0 and 2", []byte{0x05}, 1, 3, [][]bool{{true, false, true}}},
		{"two vCPUs, 10 host CPUs, 2 bytes each", []byte{0xff, 0x03, 0x00, 0x02}, 2, 10, [][]bool{
			{true, true, true, true, true, true, true, true, true, true},
			{false, false, false, false, false, false, false, false, false, true}}},
		{"short answer", []byte{0x01}, 2, 4, [][]bool{{true, false, false, false}, {false, false, false, false}}},
		{"no vCPUs", nil, 0, 4, [][]bool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cpuMap(tt.raw, tt.n, tt.hosts); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCheckIdentity(t *testing.T) {
	mk := func(ns, name, uid string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Namespace, v.Name, v.UID = ns, name, types.UID(uid)
		return v
	}
	m := New(Config{})
	if err := m.checkIdentity(mk("ns", "a", ""), true); err == nil {
		t.Error("a VMI without uid was accepted as the first")
	}
	if err := m.checkIdentity(mk("ns", "a", "u1"), true); err != nil {
		t.Fatal(err)
	}
	if err := m.checkIdentity(mk("ns", "a", "u1"), true); err != nil {
		t.Errorf("same VMI again: %v", err)
	}
	err := m.checkIdentity(mk("ns", "a", "u2"), true)
	if err == nil || !strings.Contains(err.Error(), "uid u1") {
		t.Errorf("other uid: %v", err)
	}
	if err := m.checkIdentity(mk("ns", "b", "u1"), false); err == nil {
		t.Error("other name accepted")
	}
	m2 := New(Config{Identity: Identity{Name: "x", Namespace: "ns", UID: "u9"}})
	if err := m2.checkIdentity(mk("ns", "x", "u8"), true); err == nil {
		t.Error("uid differing from --uid accepted")
	}
	if d, _, _ := m.names(); d != "ns_a" {
		t.Errorf("domain name %q", d)
	}
}

func TestJobInfoFromParams(t *testing.T) {
	u := func(f string, v uint64) libvirt.TypedParam {
		return libvirt.TypedParam{Field: f, Value: libvirt.TypedParamValue{I: v}}
	}
	for _, c := range []struct {
		name   string
		params []libvirt.TypedParam
		want   StatsJobInfo
	}{
		{"none", nil, StatsJobInfo{}},
		{"progress", []libvirt.TypedParam{u(libvirt.DomainJobDataTotal, 1000), u(libvirt.DomainJobDataProcessed, 600),
			u(libvirt.DomainJobDataRemaining, 400), u(libvirt.DomainJobMemoryBps, 50)},
			StatsJobInfo{DataTotalSet: true, DataTotal: 1000, DataProcessedSet: true, DataProcessed: 600,
				DataRemainingSet: true, DataRemaining: 400, MemoryBpsSet: true, MemoryBps: 50}},
		{"dirty rate in bytes: pages times the page size", []libvirt.TypedParam{u(libvirt.DomainJobMemoryDirtyRate, 3), u(libvirt.DomainJobMemoryPageSize, 4096)},
			StatsJobInfo{MemDirtyRateSet: true, MemDirtyRate: 12288}},
		{"dirty rate without the page size: not set", []libvirt.TypedParam{u(libvirt.DomainJobMemoryDirtyRate, 3)}, StatsJobInfo{}},
	} {
		if got := jobInfoFromParams(c.params); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
