package netsetup_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func needRoot(t testing.TB) {
	t.Helper()
	testenv.Root(t, "creates network namespaces, links and nftables rules")
}

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func newPod(t testing.TB, cfg podnet.Config) *podnet.Pod {
	t.Helper()
	cfg.Dir = t.TempDir()
	p, err := podnet.New(cfg)
	if err != nil {
		t.Fatalf("podnet: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Remove(); err != nil {
			t.Errorf("remove pod net: %v", err)
		}
	})
	return p
}

// snapshot lists everything this package could touch in a namespace:
// links with their kind, master, MAC and MTU, addresses, routes and the
// nftables ruleset. Two equal snapshots mean nothing changed.
func snapshot(t testing.TB, ns netns.NsHandle) string {
	t.Helper()
	var lines []string
	err := plan.InNS(ns, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		names := map[int]string{}
		for _, l := range links {
			names[l.Attrs().Index] = l.Attrs().Name
		}
		for _, l := range links {
			a := l.Attrs()
			extra := ""
			if tp, ok := l.(*netlink.Tuntap); ok {
				extra = fmt.Sprintf(" owner=%d group=%d flags=%#x", tp.Owner, tp.Group, tp.Flags)
			}
			lines = append(lines, fmt.Sprintf("link %s type=%s master=%s mac=%s mtu=%d up=%v%s",
				a.Name, l.Type(), names[a.MasterIndex], a.HardwareAddr, a.MTU, a.Flags&net.FlagUp != 0, extra))
			addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, ad := range addrs {
				if ad.IP.To4() == nil && ad.IP.IsLinkLocalUnicast() {
					continue // fe80::, kernel-made from the MAC
				}
				lines = append(lines, fmt.Sprintf("addr %s %s", a.Name, ad.IPNet))
			}
		}
		routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{}, 0)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if r.Dst != nil && r.Dst.IP.To4() == nil && r.Dst.IP.IsLinkLocalUnicast() {
				continue
			}
			lines = append(lines, fmt.Sprintf("route dev=%s dst=%v gw=%v src=%v", names[r.LinkIndex], r.Dst, r.Gw, r.Src))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	lines = append(lines, nftDump(t, ns)...)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func nftDump(t testing.TB, ns netns.NsHandle) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	var out []string
	for _, tb := range tables {
		out = append(out, fmt.Sprintf("table %d %s", tb.Family, tb.Name))
		chains, err := c.ListChainsOfTableFamily(tb.Family)
		if err != nil {
			t.Fatalf("list chains: %v", err)
		}
		for _, ch := range chains {
			if ch.Table.Name != tb.Name {
				continue
			}
			out = append(out, fmt.Sprintf("chain %d %s %s", tb.Family, tb.Name, ch.Name))
			rules, err := c.GetRules(tb, ch)
			if err != nil {
				t.Fatalf("list rules: %v", err)
			}
			for i, r := range rules {
				var ex []string
				for _, e := range r.Exprs {
					ex = append(ex, fmt.Sprintf("%T%+v", e, e))
				}
				out = append(out, fmt.Sprintf("rule %d %s %s %03d %s", tb.Family, tb.Name, ch.Name, i, strings.Join(ex, " ")))
			}
		}
	}
	return out
}

func masqVMI(name string, ports ...v1.Port) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace = name, "default"
	vmi.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{
		Name: "default", Ports: ports,
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}},
	}}
	return vmi
}

func bridgeVMI(name string) *v1.VirtualMachineInstance {
	vmi := masqVMI(name)
	vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	return vmi
}

func TestPrivilegedMasqueradeIdempotentAndTeardown(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{MTU: 1400})
	cfg := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := masqVMI("vm1", v1.Port{Port: 80}, v1.Port{Port: 53, Protocol: "UDP"})

	before := snapshot(t, pod.NS)
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	first := snapshot(t, pod.NS)
	for _, want := range []string{
		"link k6t-eth0 type=bridge master= mac=02:00:00:00:00:00 mtu=1400 up=true",
		"link tap0 type=tuntap master=k6t-eth0",
		"owner=107 group=107",
		"addr k6t-eth0 10.0.2.1/24",
		"addr k6t-eth0 fd10:0:2::1/120",
		"table 2 " + netsetup.NATTable,
		"table 10 " + netsetup.NATTable,
		"chain 2 virtlauncher_nat KUBEVIRT_PREINBOUND",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("after setup, missing %q in:\n%s", want, first)
		}
	}
	var fwd []byte
	plan.InNS(pod.NS, func() (err error) { fwd, err = os.ReadFile("/proc/sys/net/ipv4/ip_forward"); return })
	if strings.TrimSpace(string(fwd)) != "1" {
		t.Errorf("ip_forward = %q in pod netns", fwd)
	}
	c, err := plan.ReadVifCache(cfg.CacheDir, "eth0")
	if err != nil {
		t.Fatalf("cache: %v", err)
	}
	if c.IP.IPNet.String() != "10.0.2.2/24" || c.IPv6.IPNet.String() != "fd10:0:2::2/120" ||
		c.Gateway.String() != "10.0.2.1" || c.Mtu != 1400 || c.MAC == nil {
		t.Errorf("cache = %+v", c)
	}

	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	if second := snapshot(t, pod.NS); second != first {
		t.Errorf("second setup changed the namespace:\nfirst:\n%s\nsecond:\n%s", first, second)
	}

	if err := netsetup.TeardownPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if after := snapshot(t, pod.NS); after != before {
		t.Errorf("teardown left changes:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(cfg.CacheDir + "/vif-cache-eth0.json"); !os.IsNotExist(err) {
		t.Errorf("cache file left: %v", err)
	}
	if err := netsetup.TeardownPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Errorf("second teardown: %v", err)
	}
}

func TestPrivilegedBridgeTeardownRestores(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{})
	cfg := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := bridgeVMI("vm1")

	before := snapshot(t, pod.NS)
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	first := snapshot(t, pod.NS)
	for _, want := range []string{
		"link eth0-nic type=veth master=k6t-eth0",
		"link eth0 type=" + placeholder(),
		"link tap0 type=tuntap master=k6t-eth0",
		"addr k6t-eth0 169.254.75.10/32",
		"addr eth0 192.168.66.2/24",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("after setup, missing %q in:\n%s", want, first)
		}
	}
	if strings.Contains(first, "addr eth0-nic") {
		t.Errorf("pod NIC kept an address:\n%s", first)
	}
	c, err := plan.ReadVifCache(cfg.CacheDir, "eth0")
	if err != nil {
		t.Fatalf("cache: %v", err)
	}
	if c.IP.IPNet.String() != "192.168.66.2/24" || c.Gateway.String() != "192.168.66.1" ||
		c.AdvertisingIPAddr.String() != "169.254.75.10" || c.IPAMDisabled {
		t.Errorf("cache = %+v", c)
	}
	if !strings.Contains(before, "mac="+c.MAC.String()) {
		t.Errorf("guest MAC %s is not the pod NIC's original MAC", c.MAC)
	}
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	if second := snapshot(t, pod.NS); second != first {
		t.Errorf("second setup changed the namespace:\nfirst:\n%s\nsecond:\n%s", first, second)
	}
	if err := netsetup.TeardownPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if after := snapshot(t, pod.NS); after != before {
		t.Errorf("teardown did not restore:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestPrivilegedInvalidLeavesNothing(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{})
	cfg := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	before := snapshot(t, pod.NS)

	second := masqVMI("vm1")
	// A secondary bridge interface whose pod interface does not exist: the
	// first interface is wired, then the second fails and all is rolled back.
	second.Spec.Networks = append(second.Spec.Networks, v1.Network{Name: "blue",
		NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "blue-net"}}})
	second.Spec.Domain.Devices.Interfaces = append(second.Spec.Domain.Devices.Interfaces, v1.Interface{
		Name: "blue", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})

	for name, tc := range map[string]struct {
		vmi  *v1.VirtualMachineInstance
		want string
	}{
		"port out of range": {masqVMI("vm1", v1.Port{Port: 70000}), "ports[0].port"},
		"repeated port":     {masqVMI("vm1", v1.Port{Port: 22}, v1.Port{Port: 22}), "repeats"},
		"missing pod iface": {second, "pod" /* pod<hash> */},
	} {
		err := netsetup.SetupPrivileged(ctx, pod.NS, tc.vmi, cfg, testLog(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", name, err, tc.want)
		}
		if after := snapshot(t, pod.NS); after != before {
			t.Errorf("%s: failed setup left changes:\nbefore:\n%s\nafter:\n%s", name, before, after)
		}
		if ents, _ := os.ReadDir(cfg.CacheDir); len(ents) != 0 {
			t.Errorf("%s: files left in cache dir: %v", name, ents)
		}
	}
}

// dhcpLease runs a real DHCPv4 exchange from the fake guest's eth0.
func dhcpLease(t testing.TB, g *podnet.FakeGuest) *nclient4.Lease {
	t.Helper()
	lease, err := tryDHCPLease(g, 3)
	if err != nil {
		t.Fatalf("DHCP exchange: %v", err)
	}
	return lease
}

// tryDHCPLease is one DHCPv4 exchange from the fake guest, each message
// tried retries times 2 s apart.
func tryDHCPLease(g *podnet.FakeGuest, retries int) (*nclient4.Lease, error) {
	var lease *nclient4.Lease
	err := plan.InNS(g.NS, func() error {
		cl, err := nclient4.New("eth0", nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(retries))
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lease, err = cl.Request(ctx)
		return err
	})
	return lease, err
}

// configureGuest applies a lease in the guest namespace.
func configureGuest(t testing.TB, g *podnet.FakeGuest, ack *dhcpv4.DHCPv4) {
	t.Helper()
	err := plan.InNS(g.NS, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ack.YourIPAddr, Mask: ack.SubnetMask()}}); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: ack.Router()[0]})
	})
	if err != nil {
		t.Fatalf("configure guest: %v", err)
	}
}

// serveHTTP listens in ns and answers every request with body.
func serveHTTP(t testing.TB, ns netns.NsHandle, addr, body string) {
	t.Helper()
	var ln net.Listener
	if err := plan.InNS(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// httpGet fetches url with a socket opened in ns.
func httpGet(ns netns.NsHandle, url string) (string, error) {
	var conn net.Conn
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var err error
			ierr := plan.InNS(ns, func() error {
				d := net.Dialer{Timeout: 3 * time.Second}
				conn, err = d.DialContext(ctx, network, addr)
				return nil
			})
			if ierr != nil {
				return nil, ierr
			}
			return conn, err
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestMasqueradeDHCPAndNAT(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{MTU: 1450, DNS: []string{"192.168.66.1", "fd00:66::1"},
		Search: []string{"default.svc.cluster.local", "cluster.local"}})
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := masqVMI("vm1", v1.Port{Port: 8080})
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	t.Cleanup(func() { netsetup.TeardownPrivileged(ctx, pod.NS, vmi, priv, testLog(t)) })
	ifs, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir,
		ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	if err != nil {
		t.Fatalf("dhcp: %v", err)
	}
	defer stop()
	f := ifs["default"]
	if f.Tap != "tap0" || f.MTU != 1450 || f.MAC == "" {
		t.Errorf("facts = %+v", f)
	}
	mac, _ := net.ParseMAC(f.MAC)
	g, err := pod.AttachFakeGuest("k6t-eth0", mac)
	if err != nil {
		t.Fatalf("fake guest: %v", err)
	}
	defer g.Remove()

	lease := dhcpLease(t, g)
	ack := lease.ACK
	checks := map[string][2]string{
		"address":  {ack.YourIPAddr.String(), "10.0.2.2"},
		"mask":     {net.IP(ack.SubnetMask()).String(), "255.255.255.0"},
		"router":   {fmt.Sprint(ack.Router()), "[10.0.2.1]"},
		"dns":      {fmt.Sprint(ack.DNS()), "[192.168.66.1]"},
		"search":   {fmt.Sprint(ack.DomainSearch().Labels), "[default.svc.cluster.local cluster.local]"},
		"hostname": {ack.HostName(), "vm1"},
		"mtu":      {fmt.Sprint(ack.Options.Get(dhcpv4.OptionInterfaceMTU)), "[5 170]"},
		"lease":    {ack.IPAddressLeaseTime(0).String(), dhcp.InfiniteLease.String()},
		"server":   {ack.ServerIdentifier().String(), "10.0.2.1"},
	}
	for k, v := range checks {
		if v[0] != v[1] {
			t.Errorf("lease %s = %s, want %s", k, v[0], v[1])
		}
	}
	configureGuest(t, g, ack)

	// Outbound through masquerade: the outside server sees the pod address.
	serveHTTP(t, pod.Outside, "192.168.66.1:8000", "outside")
	if body, err := httpGet(g.NS, "http://192.168.66.1:8000/"); err != nil || body != "outside" {
		t.Errorf("guest -> outside: %q, %v", body, err)
	}
	// Inbound: declared port 8080 reaches the guest, undeclared 8081 not.
	serveHTTP(t, g.NS, "0.0.0.0:8080", "guest8080")
	serveHTTP(t, g.NS, "0.0.0.0:8081", "guest8081")
	if body, err := httpGet(pod.Outside, "http://192.168.66.2:8080/"); err != nil || body != "guest8080" {
		t.Errorf("outside -> pod:8080: %q, %v", body, err)
	}
	if body, err := httpGet(pod.Outside, "http://192.168.66.2:8081/"); err == nil {
		t.Errorf("outside -> pod:8081 (undeclared) reached %q", body)
	}
	// From inside the pod, to its own address and to 127.0.0.1.
	for _, u := range []string{"http://192.168.66.2:8080/", "http://127.0.0.1:8080/"} {
		if body, err := httpGet(pod.NS, u); err != nil || body != "guest8080" {
			t.Errorf("pod -> %s: %q, %v", u, body, err)
		}
	}
}

func TestBridgeDHCPAndReachability(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{NoIPv6: true})
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := bridgeVMI("vm2")
	vmi.Spec.Hostname = "myhost"
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	t.Cleanup(func() { netsetup.TeardownPrivileged(ctx, pod.NS, vmi, priv, testLog(t)) })
	ifs, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir,
		ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	if err != nil {
		t.Fatalf("dhcp: %v", err)
	}
	defer stop()
	mac, _ := net.ParseMAC(ifs["default"].MAC)
	g, err := pod.AttachFakeGuest("k6t-eth0", mac)
	if err != nil {
		t.Fatalf("fake guest: %v", err)
	}
	defer g.Remove()
	ack := dhcpLease(t, g).ACK
	if ack.YourIPAddr.String() != "192.168.66.2" || fmt.Sprint(ack.Router()) != "[192.168.66.1]" ||
		ack.ServerIdentifier().String() != "169.254.75.10" || ack.HostName() != "myhost" ||
		net.IP(ack.SubnetMask()).String() != "255.255.255.0" {
		t.Errorf("bridge lease: %s", ack.Summary())
	}
	configureGuest(t, g, ack)
	serveHTTP(t, pod.Outside, "192.168.66.1:8000", "outside")
	if body, err := httpGet(g.NS, "http://192.168.66.1:8000/"); err != nil || body != "outside" {
		t.Errorf("guest -> outside: %q, %v", body, err)
	}
	serveHTTP(t, g.NS, "0.0.0.0:9000", "guest")
	if body, err := httpGet(pod.Outside, "http://192.168.66.2:9000/"); err != nil || body != "guest" {
		t.Errorf("outside -> guest at pod address: %q, %v", body, err)
	}
}

// placeholder is the link type the bridge binding keeps the pod name with.
func placeholder() string {
	if _, err := os.Stat("/sys/module/dummy"); err == nil {
		return "dummy"
	}
	return "bridge"
}
