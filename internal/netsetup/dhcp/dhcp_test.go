package dhcp

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/vishvananda/netlink"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

func TestParseResolvConf(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DNSConfig
	}{
		{"", DNSConfig{}},
		{"nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
			DNSConfig{Servers4: []net.IP{net.ParseIP("10.96.0.10").To4()}, Search: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}}},
		{"# c\nnameserver fd00::10\nnameserver 1.1.1.1\nnameserver bogus\ndomain example.org\n",
			DNSConfig{Servers4: []net.IP{net.ParseIP("1.1.1.1").To4()}, Servers6: []net.IP{net.ParseIP("fd00::10")}, Search: []string{"example.org"}}},
		{"search a b\nsearch c\n", DNSConfig{Search: []string{"c"}}},
	} {
		if got := ParseResolvConf([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseResolvConf(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestSearchDomainsAndHostname(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace = "vm", "ns1"
	search := []string{"ns1.svc.cluster.local", "svc.cluster.local"}
	if got := searchDomains(vmi, search); !reflect.DeepEqual(got, search) {
		t.Errorf("no subdomain: %v", got)
	}
	vmi.Spec.Subdomain = "sub"
	if got := searchDomains(vmi, search); got[0] != "sub.ns1.svc.cluster.local" || len(got) != 3 {
		t.Errorf("subdomain: %v", got)
	}
	if GuestHostname(vmi) != "vm" {
		t.Errorf("hostname = %s", GuestHostname(vmi))
	}
	vmi.Spec.Hostname = "h"
	if GuestHostname(vmi) != "h" {
		t.Errorf("spec.hostname ignored")
	}
}

func mustCIDR(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

func TestOptions4(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	routes := []netlink.Route{
		{Dst: mustCIDR("192.168.66.0/24")},                                  // connected: dropped
		{Gw: net.ParseIP("192.168.66.1")},                                   // default
		{Dst: mustCIDR("10.200.0.0/16"), Gw: net.ParseIP("192.168.66.254")}, // extra
	}
	onlyDefault := routes[:2]
	for _, tc := range []struct {
		name  string
		cache plan.VifCache
		dns   DNSConfig
		want  map[dhcpv4.OptionCode]string
		none  []dhcpv4.OptionCode
	}{
		{"masquerade", plan.VifCache{Name: "eth0", IP: netlink.Addr{IPNet: mustCIDR("10.0.2.2/24")}, MAC: mac,
			AdvertisingIPAddr: net.ParseIP("10.0.2.1"), Gateway: net.ParseIP("10.0.2.1"), Mtu: 1450},
			DNSConfig{Servers4: []net.IP{net.ParseIP("10.96.0.10")}, Search: []string{"a.b", "b"}},
			map[dhcpv4.OptionCode]string{
				dhcpv4.OptionServerIdentifier:    "[10 0 2 1]",
				dhcpv4.OptionSubnetMask:          "[255 255 255 0]",
				dhcpv4.OptionRouter:              "[10 0 2 1]",
				dhcpv4.OptionDomainNameServer:    "[10 96 0 10]",
				dhcpv4.OptionInterfaceMTU:        "[5 170]",
				dhcpv4.OptionHostName:            "[118 109]", // "vm"
				dhcpv4.OptionDomainName:          "[97 46 98]",
				dhcpv4.OptionIPAddressLeaseTime:  fmt.Sprint(u32(uint32(InfiniteLease / time.Second))),
				dhcpv4.OptionDNSDomainSearchList: "[1 97 1 98 0 1 98 0]",
			},
			[]dhcpv4.OptionCode{dhcpv4.OptionClasslessStaticRoute}},
		{"bridge with extra route", plan.VifCache{Name: "eth0", IP: netlink.Addr{IPNet: mustCIDR("192.168.66.2/24")}, MAC: mac,
			AdvertisingIPAddr: net.ParseIP("169.254.75.10"), Gateway: net.ParseIP("192.168.66.1"), Mtu: 1500, Routes: &routes},
			DNSConfig{},
			map[dhcpv4.OptionCode]string{
				dhcpv4.OptionServerIdentifier: "[169 254 75 10]",
				dhcpv4.OptionRouter:           "[192 168 66 1]",
				// 0.0.0.0/0 via .1, 10.200.0.0/16 via .254
				dhcpv4.OptionClasslessStaticRoute: "[0 192 168 66 1 16 10 200 192 168 66 254]",
			},
			[]dhcpv4.OptionCode{dhcpv4.OptionDomainNameServer, dhcpv4.OptionDNSDomainSearchList}},
		{"bridge default route only", plan.VifCache{Name: "eth0", IP: netlink.Addr{IPNet: mustCIDR("192.168.66.2/24")}, MAC: mac,
			AdvertisingIPAddr: net.ParseIP("169.254.75.10"), Gateway: net.ParseIP("192.168.66.1"), Routes: &onlyDefault},
			DNSConfig{},
			map[dhcpv4.OptionCode]string{dhcpv4.OptionRouter: "[192 168 66 1]"},
			[]dhcpv4.OptionCode{dhcpv4.OptionClasslessStaticRoute, dhcpv4.OptionInterfaceMTU}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := lease4From(&tc.cache, tc.dns, "vm", tc.dns.Search)
			if err != nil {
				t.Fatal(err)
			}
			opts := dhcpv4.OptionsFromList(l.Options4()...)
			for code, want := range tc.want {
				if got := fmt.Sprint(opts.Get(code)); got != want {
					t.Errorf("option %s = %s, want %s", code, got, want)
				}
			}
			for _, code := range tc.none {
				if opts.Has(code) {
					t.Errorf("option %s present: %v", code, opts.Get(code))
				}
			}
		})
	}
}

func u32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func TestLease4FromRejectsIncompleteCache(t *testing.T) {
	for name, c := range map[string]plan.VifCache{
		"no ip":     {Name: "eth0", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, AdvertisingIPAddr: net.ParseIP("10.0.2.1")},
		"no mac":    {Name: "eth0", IP: netlink.Addr{IPNet: mustCIDR("10.0.2.2/24")}, AdvertisingIPAddr: net.ParseIP("10.0.2.1")},
		"no server": {Name: "eth0", IP: netlink.Addr{IPNet: mustCIDR("10.0.2.2/24")}, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}},
	} {
		if _, err := lease4From(&c, DNSConfig{}, "vm", nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestAnyClient: only a masquerade interface's server answers a MAC
// other than the one it was given.
func TestAnyClient(t *testing.T) {
	for b, want := range map[string]bool{plan.BindingMasquerade: true, plan.BindingBridge: false} {
		if got := anyClient(b); got != want {
			t.Errorf("anyClient(%v) = %v, want %v", b, got, want)
		}
	}
	// A masquerade guest migrated in keeps its first pod's MAC, which is
	// not the MAC of the target pod's interface.
	l := Lease4{Addr: *mustCIDR("10.0.2.2/24"), ServerID: net.ParseIP("10.0.2.1").To4(), LeaseTime: InfiniteLease}
	for typ, want := range map[dhcpv4.MessageType]dhcpv4.MessageType{
		dhcpv4.MessageTypeDiscover: dhcpv4.MessageTypeOffer,
		dhcpv4.MessageTypeRequest:  dhcpv4.MessageTypeAck,
	} {
		req, err := dhcpv4.New(dhcpv4.WithHwAddr(net.HardwareAddr{2, 0, 0, 0, 0, 8}), dhcpv4.WithMessageType(typ),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.2"))))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := l.Reply4(req)
		if err != nil || resp == nil || resp.MessageType() != want {
			t.Errorf("any client, %s: reply %v (%v), want %s", typ, resp, err, want)
		}
	}
}

func TestReply4(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	l := Lease4{ClientMAC: mac, Addr: *mustCIDR("10.0.2.2/24"), Router: net.ParseIP("10.0.2.1").To4(),
		ServerID: net.ParseIP("10.0.2.1").To4(), LeaseTime: InfiniteLease}
	req := func(typ dhcpv4.MessageType, hw net.HardwareAddr, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
		m, err := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(typ)}, mods...)...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		req  *dhcpv4.DHCPv4
		want string // message type, or "" for no answer
	}{
		{"discover", req(dhcpv4.MessageTypeDiscover, mac), "OFFER"},
		{"request", req(dhcpv4.MessageTypeRequest, mac, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.2"))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.1")))), "ACK"},
		{"renew (ciaddr)", req(dhcpv4.MessageTypeRequest, mac, dhcpv4.WithClientIP(net.ParseIP("10.0.2.2"))), "ACK"},
		{"wrong address", req(dhcpv4.MessageTypeRequest, mac, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.9")))), "NAK"},
		{"other server", req(dhcpv4.MessageTypeRequest, mac, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.2"))),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.77")))), ""},
		{"other MAC", req(dhcpv4.MessageTypeDiscover, net.HardwareAddr{2, 0, 0, 0, 0, 8}), ""},
		{"release", req(dhcpv4.MessageTypeRelease, mac), ""},
	} {
		resp, err := l.Reply4(tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := ""
		if resp != nil {
			got = resp.MessageType().String()
		}
		if got != tc.want {
			t.Errorf("%s: reply %q, want %q", tc.name, got, tc.want)
		}
		if got == "ACK" || got == "OFFER" {
			if !resp.YourIPAddr.Equal(net.ParseIP("10.0.2.2")) || resp.TransactionID != tc.req.TransactionID {
				t.Errorf("%s: yiaddr %s xid %s", tc.name, resp.YourIPAddr, resp.TransactionID)
			}
		}
	}
}

func TestReply6(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	l := Lease6{Addr: net.ParseIP("fd10:0:2::2"), ServerID: &dhcpv6.DUIDLL{HWType: 1, LinkLayerAddr: mac},
		DNS: []net.IP{net.ParseIP("fd00::10")}, Search: []string{"cluster.local"}}
	sol, err := dhcpv6.NewSolicit(mac)
	if err != nil {
		t.Fatal(err)
	}
	adv, err := l.Reply6(sol)
	if err != nil || adv == nil || adv.MessageType != dhcpv6.MessageTypeAdvertise {
		t.Fatalf("solicit -> %v, %v", adv, err)
	}
	iana := adv.Options.OneIANA()
	if iana == nil || iana.Options.OneAddress() == nil || !iana.Options.OneAddress().IPv6Addr.Equal(l.Addr) {
		t.Fatalf("advertise IA_NA: %v", adv.Summary())
	}
	if !reflect.DeepEqual(adv.Options.DNS(), l.DNS) || adv.Options.DomainSearchList() == nil {
		t.Errorf("advertise DNS: %v", adv.Summary())
	}
	reqMsg, err := dhcpv6.NewRequestFromAdvertise(adv)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := l.Reply6(reqMsg)
	if err != nil || rep == nil || rep.MessageType != dhcpv6.MessageTypeReply {
		t.Fatalf("request -> %v, %v", rep, err)
	}
	if rel, _ := l.Reply6(&dhcpv6.Message{MessageType: dhcpv6.MessageTypeRelease}); rel != nil {
		t.Errorf("release answered: %v", rel)
	}
}

func TestVifCacheJSONRoundTrip(t *testing.T) {
	routes := []netlink.Route{{Gw: net.ParseIP("192.168.66.1")}, {Dst: mustCIDR("10.0.0.0/8"), Gw: net.ParseIP("192.168.66.254")}}
	c := &plan.VifCache{Name: "eth0", IP: netlink.Addr{IPNet: mustCIDR("192.168.66.2/24")}, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 9},
		AdvertisingIPAddr: net.ParseIP("169.254.75.10"), Routes: &routes, Mtu: 1500, Gateway: net.ParseIP("192.168.66.1")}
	dir := t.TempDir()
	if err := plan.WriteVifCache(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := plan.ReadVifCache(dir, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if got.IP.IPNet.String() != "192.168.66.2/24" || got.MAC.String() != c.MAC.String() || len(*got.Routes) != 2 ||
		(*got.Routes)[1].Dst.String() != "10.0.0.0/8" || !got.Gateway.Equal(c.Gateway) || got.Mtu != 1500 {
		t.Errorf("round trip: %+v", got)
	}
	// The keys are KubeVirt's Config field names.
	var m map[string]any
	b, _ := json.Marshal(c)
	json.Unmarshal(b, &m)
	for _, k := range []string{"Name", "IP", "IPv6", "MAC", "AdvertisingIPAddr", "AdvertisingIPv6Addr", "Routes", "Mtu", "IPAMDisabled", "Gateway", "Subdomain"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %s missing in %s", k, b)
		}
	}
}

// TestCustomOptions4Refuses: dhcpOptions the VMI's validation refuses are
// refused here too, naming the field, rather than sent half.
func TestCustomOptions4Refuses(t *testing.T) {
	for _, tc := range []struct {
		o    v1.DHCPOptions
		want string
	}{
		{v1.DHCPOptions{NTPServers: []string{"2001:db8::1"}}, `ifc.dhcpOptions.ntpServers[0]: "2001:db8::1" is not an IPv4 address`},
		{v1.DHCPOptions{PrivateOptions: []v1.DHCPPrivateOptions{{Option: 223}}}, "ifc.dhcpOptions.privateOptions[0].option: 223 is not in the private range 224-254"},
		{v1.DHCPOptions{PrivateOptions: []v1.DHCPPrivateOptions{{Option: 230}, {Option: 230}}}, "ifc.dhcpOptions.privateOptions[1].option: 230 is given twice"},
	} {
		if _, err := customOptions4(&tc.o, "ifc"); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
	opts, err := customOptions4(&v1.DHCPOptions{BootFileName: "b", TFTPServerName: "t", NTPServers: []string{"192.0.2.1"},
		PrivateOptions: []v1.DHCPPrivateOptions{{Option: 240, Value: "v"}}}, "ifc")
	got := dhcpv4.OptionsFromList(opts...)
	if err != nil || string(got.Get(dhcpv4.OptionTFTPServerName)) != "t" || string(got.Get(dhcpv4.OptionBootfileName)) != "b" ||
		fmt.Sprint(got.Get(dhcpv4.OptionNTPServers)) != "[192 0 2 1]" || string(got.Get(dhcpv4.GenericOptionCode(240))) != "v" {
		t.Errorf("options %v, %v", got, err)
	}
}
