package guestnet_test

import (
	"fmt"
	"github.com/virtlauncher/virtlauncher/internal/guestnet/guestnettest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/testnet"
)

// TestEgressRefusesHost: the guest's egress reaches a host of the
// internet, with a socket owned by the VM's id, not root; it does not
// reach the host: a service on an address the host took after the relay
// started, one on 0.0.0.0 reached at the host's own address, link-local
// and cloud metadata addresses are refused at once, each with a line.
func TestEgressRefusesHost(t *testing.T) {
	p, _, status := guestnettest.EgressTestPod(t)
	far := testnet.FarHost(t, "VL-FAR-PAGE")
	if got, err := testnet.Fetch(p, far); err != nil || !strings.Contains(got, "VL-FAR-PAGE") {
		t.Fatalf("a host of the internet through egress: %q, %v\nrelay: %s", got, err, status.String())
	}

	// The socket that reaches the far host is the VM's.
	c, err := testnet.DialFromPod(p, far)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var owners []int
	for deadline := time.Now().Add(5 * time.Second); len(owners) == 0 && time.Now().Before(deadline); {
		if owners, err = testnet.TCPOwners(far); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(owners) != 1 || owners[0] != guestnettest.EgressTestID {
		t.Errorf("the relay's sockets to %s are owned by %v, want [%d] (the VM's id)", far, owners, guestnettest.EgressTestID)
	}
	c.Close()

	// A service the host has on an address it took after the relay
	// started, and one listening on every address, reached at an
	// address of the host's (one added to its loopback device now).
	later := testnet.HostService(t, "VL-HOST-PAGE")
	any := testnet.ServeHTTP(t, netip.MustParseAddrPort("0.0.0.0:0"), "VL-HOST-PAGE")
	hostAddr := netip.AddrFrom4([4]byte{198, 19, 255, byte(time.Now().UnixNano()%200) + 1})
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	a := &netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(hostAddr, 32))}
	if err := netlink.AddrAdd(lo, a); err != nil {
		t.Fatal(err)
	}
	defer netlink.AddrDel(lo, a)
	for _, c := range []struct {
		to   netip.AddrPort
		says string
	}{
		{later, "the host's own addresses"},
		{netip.AddrPortFrom(hostAddr, any.Port()), "the host's own addresses"},
		{netip.MustParseAddrPort("169.254.169.254:80"), "link-local"},
		{netip.MustParseAddrPort("168.63.129.16:80"), "a cloud metadata service"},
		{netip.MustParseAddrPort("100.100.100.200:80"), "a cloud metadata service"},
	} {
		start := time.Now()
		got, err := testnet.Fetch(p, c.to)
		if strings.Contains(got, "VL-HOST-PAGE") || time.Since(start) > 3*time.Second {
			t.Errorf("egress to %s: %q, %v after %v: want it refused at once", c.to, got, err, time.Since(start))
		}
		if want := fmt.Sprintf("vlctl: guest egress: to %s: %s", c.to, c.says); !strings.Contains(status.String(), want) {
			t.Errorf("no line %q from the relay:\n%s", want, status.String())
		}
	}
}
