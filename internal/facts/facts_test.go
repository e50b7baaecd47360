package facts_test

import (
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

func TestPCIAddress(t *testing.T) {
	for _, tc := range []struct {
		in                 string
		dom, bus, slot, fn uint
		err                bool
	}{
		{in: "0000:81:00.1", bus: 0x81, fn: 1},
		{in: "0001:3b:1f.7", dom: 1, bus: 0x3b, slot: 0x1f, fn: 7},
		{in: "02:00.0", bus: 2},
		{in: "0000:81:20.0", err: true}, // slot above 0x1f
		{in: "0000:81:00.8", err: true},
		{in: "81:00", err: true},
		{in: "", err: true},
		{in: "0000:81:00.1 ", err: true},
	} {
		a, err := facts.PCIAddress(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if *a.Domain != tc.dom || *a.Bus != tc.bus || *a.Slot != tc.slot || *a.Function != tc.fn {
			t.Errorf("%q = %d:%d:%d.%d", tc.in, *a.Domain, *a.Bus, *a.Slot, *a.Function)
		}
	}
}

func TestTopologyAndModels(t *testing.T) {
	cpu := func(s, c, th uint32) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.CPU = &v1.CPU{Sockets: s, Cores: c, Threads: th}
		return v
	}
	withRes := func(kind string, q string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		l := k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse(q)}
		if kind == "limits" {
			v.Spec.Domain.Resources.Limits = l
		} else {
			v.Spec.Domain.Resources.Requests = l
		}
		return v
	}
	for _, tc := range []struct {
		name    string
		vmi     *v1.VirtualMachineInstance
		s, c, t uint32
	}{
		{"spec", cpu(2, 3, 2), 2, 3, 2},
		{"zeros read as one", cpu(0, 4, 0), 1, 4, 1},
		{"nothing", &v1.VirtualMachineInstance{}, 1, 1, 1},
		{"limits rounded up", withRes("limits", "2500m"), 3, 1, 1},
		{"requests", withRes("requests", "2"), 2, 1, 1},
	} {
		s, c, th := facts.Topology(tc.vmi)
		if s != tc.s || c != tc.c || th != tc.t {
			t.Errorf("%s: %d/%d/%d, want %d/%d/%d", tc.name, s, c, th, tc.s, tc.c, tc.t)
		}
	}
	if n := facts.VCPUs(cpu(2, 3, 2)); n != 12 {
		t.Errorf("VCPUs = %d", n)
	}
	ctx := facts.Default(layout.Default())
	v := &v1.VirtualMachineInstance{}
	for _, tc := range []struct {
		arch, transitional, wantArch, wantModel string
	}{
		{"", "", "amd64", "virtio-non-transitional"},
		{"x86_64", "yes", "amd64", "virtio-transitional"},
		{"aarch64", "", "arm64", "virtio-non-transitional"},
		{"s390x", "yes", "s390x", "virtio"},
	} {
		v.Spec.Architecture = tc.arch
		v.Spec.Domain.Devices.UseVirtioTransitional = nil
		if tc.transitional != "" {
			b := true
			v.Spec.Domain.Devices.UseVirtioTransitional = &b
		}
		if a := facts.Arch(v, ctx); a != tc.wantArch {
			t.Errorf("Arch(%q) = %s", tc.arch, a)
		}
		if m := facts.VirtioModel(v, ctx); m != tc.wantModel {
			t.Errorf("VirtioModel(%q, %s) = %s", tc.arch, tc.transitional, m)
		}
	}
}

func TestLibvirtArch(t *testing.T) {
	for _, tc := range []struct{ goarch, want string }{
		{"amd64", "x86_64"},
		{"arm64", "aarch64"},
		{"386", "i686"},
		{"s390x", "s390x"},
		{"ppc64le", "ppc64le"},
	} {
		if got := facts.LibvirtArch(tc.goarch); got != tc.want {
			t.Errorf("LibvirtArch(%s) = %s, want %s", tc.goarch, got, tc.want)
		}
	}
}
