package podnet_test

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func TestPodNetwork(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	dir := t.TempDir()
	a, err := podnet.New(podnet.Config{Dir: dir, Search: []string{"ns.svc.cluster.local"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := podnet.New(podnet.Config{Dir: dir, NoIPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.NSName == b.NSName || a.OutsideName == b.OutsideName || a.ResolvConf == b.ResolvConf {
		t.Errorf("two pods share names: %s %s", a.NSName, b.NSName)
	}
	for _, n := range []string{a.NSName, a.OutsideName, b.NSName, b.OutsideName} {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err != nil {
			t.Errorf("namespace %s: %v", n, err)
		}
	}
	rc, err := os.ReadFile(a.ResolvConf)
	if err != nil || !strings.Contains(string(rc), "nameserver 192.168.66.1\n") || !strings.Contains(string(rc), "search ns.svc.cluster.local\n") {
		t.Errorf("resolv.conf %q, %v", rc, err)
	}

	// eth0 in the pod: address, default route via the outside, and the
	// outside answers on TCP.
	var ln net.Listener
	if err := plan.InNS(a.Outside, func() (err error) { ln, err = net.Listen("tcp", "192.168.66.1:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	err = plan.InNS(a.NS, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		def := false
		for _, r := range routes {
			def = def || (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(net.ParseIP("192.168.66.1"))
		}
		if !def {
			t.Errorf("no default route via 192.168.66.1: %v", routes)
		}
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2)
		_, err = c.Read(buf)
		if string(buf) != "hi" {
			t.Errorf("read %q", buf)
		}
		return err
	})
	if err != nil {
		t.Errorf("pod -> outside: %v", err)
	}

	vmi := &v1.VirtualMachineInstance{}
	vmi.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default",
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}},
		Ports:                  []v1.Port{{Port: 22}, {Port: 53, Protocol: "UDP"}}}}
	ifaces, err := plan.PlanFor(vmi, plan.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fw := a.Forwards(ifaces)
	if len(fw) != 2 || fw[0].Address != "192.168.66.2:22" || fw[1].Protocol != "UDP" || fw[1].Address != "192.168.66.2:53" {
		t.Errorf("forwards %+v", fw)
	}
	vmi.Spec.Domain.Devices.Interfaces[0].Ports = nil
	ifaces, _ = plan.PlanFor(vmi, plan.PlanOptions{})
	if fw := a.Forwards(ifaces); len(fw) != 1 || fw[0].Address != "192.168.66.2:*" {
		t.Errorf("all-ports forward %+v", fw)
	}

	for _, p := range []*podnet.Pod{a, b} {
		if err := p.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
		if err := p.Remove(); err != nil {
			t.Errorf("second remove: %v", err)
		}
		for _, n := range []string{p.NSName, p.OutsideName} {
			if _, err := os.Stat(filepath.Join("/run/netns", n)); !os.IsNotExist(err) {
				t.Errorf("namespace %s left: %v", n, err)
			}
		}
		if _, err := os.Stat(p.ResolvConf); !os.IsNotExist(err) {
			t.Errorf("resolv.conf left")
		}
	}
}

func TestNewRejectsSplitSubnet(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	_, err := podnet.New(podnet.Config{Dir: t.TempDir(),
		Pod4: mustPrefix("10.1.0.2/24"), Outside4: mustPrefix("10.2.0.1/24")})
	if err == nil || !strings.Contains(err.Error(), "not in one subnet") {
		t.Errorf("err = %v", err)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// TestResolverAddress: a resolver address other than the outside's is on
// the outside namespace's loopback, named by the pod's resolv.conf, and
// the pod reaches it (UDP) through its default route.
func TestResolverAddress(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	p, err := podnet.New(podnet.Config{Dir: t.TempDir(), NoIPv6: true, Resolver: netip.MustParseAddr("10.96.0.10")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Remove()
	rc, err := os.ReadFile(p.ResolvConf)
	if err != nil || !strings.Contains(string(rc), "nameserver 10.96.0.10\n") || strings.Contains(string(rc), "192.168.66.1") {
		t.Errorf("resolv.conf %q, %v", rc, err)
	}
	if p.Resolver.String() != "10.96.0.10" {
		t.Errorf("Resolver = %s", p.Resolver)
	}
	var srv net.PacketConn
	if err := plan.InNS(p.Outside, func() (err error) { srv, err = net.ListenPacket("udp", "10.96.0.10:5353"); return }); err != nil {
		t.Fatalf("listen at the resolver address in the outside namespace: %v", err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 64)
		if n, from, err := srv.ReadFrom(buf); err == nil {
			srv.WriteTo(buf[:n], from)
		}
	}()
	var got string
	err = plan.InNS(p.NS, func() error {
		c, err := net.Dial("udp", "10.96.0.10:5353")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		got = string(buf[:n])
		return err
	})
	if err != nil || got != "ping" {
		t.Errorf("pod -> resolver address: %q, %v", got, err)
	}
}
