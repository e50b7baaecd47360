package domain

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
)

func tp(field string, v any) libvirt.TypedParam {
	return libvirt.TypedParam{Field: field, Value: libvirt.TypedParamValue{I: v}}
}

func TestStatsFromParams(t *testing.T) {
	s := statsFromParams([]libvirt.TypedParam{
		tp("cpu.time", uint64(1000)), tp("cpu.user", uint64(10)),
		tp("balloon.current", uint64(131072)), tp("balloon.rss", uint64(9000)),
		tp("vcpu.current", uint32(2)), tp("vcpu.1.time", uint64(7)), tp("vcpu.0.state", int32(1)),
		tp("net.0.name", "tap0"), tp("net.0.rx.bytes", uint64(42)),
		tp("block.1.name", "vdb"), tp("block.0.name", "vda"), tp("block.0.wr.bytes", uint64(512)),
		tp("block.x.name", "bad"),
	})
	if !s.Cpu.TimeSet || s.Cpu.Time != 1000 || !s.Cpu.UserSet || s.Cpu.SystemSet {
		t.Errorf("cpu %+v", s.Cpu)
	}
	if !s.Memory.ActualBalloonSet || s.Memory.ActualBalloon != 131072 || s.Memory.RSS != 9000 {
		t.Errorf("memory %+v", s.Memory)
	}
	if s.NrVirtCpu != 2 || len(s.Vcpu) != 2 || s.Vcpu[1].Time != 7 || !s.Vcpu[0].StateSet || s.Vcpu[0].State != 1 {
		t.Errorf("vcpu %d %+v", s.NrVirtCpu, s.Vcpu)
	}
	if len(s.Net) != 1 || s.Net[0].Name != "tap0" || s.Net[0].RxBytes != 42 {
		t.Errorf("net %+v", s.Net)
	}
	if len(s.Block) != 2 || s.Block[0].Name != "vda" || s.Block[1].Name != "vdb" || s.Block[0].WrBytes != 512 {
		t.Errorf("block %+v", s.Block)
	}
	b, _ := json.Marshal(s)
	for _, key := range []string{`"Cpu":`, `"NrVirtCpu":2`, `"ActualBalloonSet":true`, `"RxBytes":42`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
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
	m2 := New(Config{Name: "x", Namespace: "ns", UID: "u9"})
	if err := m2.checkIdentity(mk("ns", "x", "u8"), true); err == nil {
		t.Error("uid differing from --uid accepted")
	}
	if d, _, _ := m.names(); d != "ns_a" {
		t.Errorf("domain name %q", d)
	}
}
