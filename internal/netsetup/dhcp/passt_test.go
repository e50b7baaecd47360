package dhcp

import (
	"context"
	"net"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestPasstArgs: passt's command line carries the pod interface, socket,
// pid file and log, the pod's resolvers (v4 then v6) and search domains,
// and KubeVirt's forwards ("none" for a protocol without any).
func TestPasstArgs(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	it := plan.Iface{Name: "default", PodIface: "eth0", Binding: plan.BindingPasst, Ports: []plan.Port{{Protocol: "TCP", Port: 80}}}
	dns := DNSConfig{Servers4: []net.IP{net.ParseIP("10.96.0.10")}, Servers6: []net.IP{net.ParseIP("fd00::a")},
		Search: []string{"ns.svc.cluster.local", "cluster.local"}}
	got := strings.Join(passtArgs(vmi, it, "/p/passt-eth0.sock", "/p/passt-eth0.pid", "/s/passt.log", dns), " ")
	want := "--quiet --socket /p/passt-eth0.sock --pid /p/passt-eth0.pid --interface eth0 --log-file /s/passt.log" +
		" --dns 10.96.0.10 --dns fd00::a --search ns.svc.cluster.local cluster.local --tcp-ports 80 --udp-ports none"
	if got != want {
		t.Errorf("passt args\n got %s\nwant %s", got, want)
	}
	it.Ports = nil
	got = strings.Join(passtArgs(vmi, it, "/s", "/p", "", DNSConfig{}), " ")
	if want := "--quiet --socket /s --pid /p --interface eth0 --tcp-ports all --udp-ports all"; got != want {
		t.Errorf("passt args without log, resolvers or ports\n got %s\nwant %s", got, want)
	}
}

// TestPasstRefusedAsRoot: a launcher running as root (a root pod) gets a
// clear error instead of a passt that turns into nobody.
func TestPasstRefusedAsRoot(t *testing.T) {
	testenv.Root(t, "checks how a launcher running as root refuses passt")
	vmi := &v1.VirtualMachineInstance{}
	vmi.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default",
		InterfaceBindingMethod: v1.InterfaceBindingMethod{PasstBinding: &v1.InterfacePasstBinding{}}}}
	s := New(Config{CacheDir: t.TempDir()}, nil)
	defer s.Close()
	_, err := s.Serve(context.Background(), vmi, nil)
	if err == nil || !strings.Contains(err.Error(), "passtBinding: passt does not run as root") {
		t.Errorf("Serve as root: %v, want the root refusal", err)
	}
}
