package podnet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// FakeGuest stands in for a guest NIC where no QEMU runs (tests, and the
// benchmark): a veth whose pod end is enslaved to the bridge next to the
// tap, and whose other end is "eth0" in a namespace of its own, with the
// guest's MAC. It is not the tap: QEMU is the only user of the tap.
type FakeGuest struct {
	NSName string
	NS     netns.NsHandle
	PodEnd string // the veth end in the bridge, "fg-<suffix>"
	pod    *Pod
}

// AttachFakeGuest plugs a fake guest into the named bridge of the pod.
func (p *Pod) AttachFakeGuest(bridge string, mac net.HardwareAddr) (g *FakeGuest, err error) {
	p.guests++
	g = &FakeGuest{NSName: fmt.Sprintf("vlgst-%s-%d", p.Name, p.guests), PodEnd: fmt.Sprintf("fg%d-%s", p.guests, p.Name), pod: p}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Remove())
			g = nil
		}
	}()
	if g.NS, err = NewNamedNS(g.NSName); err != nil {
		return g, err
	}
	err = plan.InNS(p.NS, func() error {
		br, err := netlink.LinkByName(bridge)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", bridge, err)
		}
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: g.PodEnd, MTU: br.Attrs().MTU, MasterIndex: br.Attrs().Index},
			PeerName:  "eth0", PeerHardwareAddr: mac,
		}
		veth.PeerNamespace = netlink.NsFd(g.NS)
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("create fake guest veth: %w", err)
		}
		l, err := netlink.LinkByName(g.PodEnd)
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		return g, err
	}
	err = plan.InNS(g.NS, func() error {
		// No duplicate address detection: the link-local address is usable
		// at once, so a DHCPv6 client can start right away.
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/eth0/accept_dad", []byte("0"), 0o644); err != nil {
			return fmt.Errorf("accept_dad: %w", err)
		}
		for _, n := range []string{"lo", "eth0"} {
			l, err := netlink.LinkByName(n)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return fmt.Errorf("%s up: %w", n, err)
			}
		}
		return waitLinkLocal("eth0", 3*time.Second)
	})
	return g, err
}

// waitLinkLocal waits (in the current namespace) until the link has a
// usable IPv6 link-local address, which the kernel adds shortly after the
// link comes up.
func waitLinkLocal(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no IPv6 link-local address after %s", name, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Remove deletes the guest namespace and the pod end of the veth.
func (g *FakeGuest) Remove() error {
	var errs []error
	if g.NS > 0 {
		g.NS.Close()
		g.NS = 0
	}
	if err := DeleteNamedNS(g.NSName); err != nil {
		errs = append(errs, err)
	}
	// The pair dies with the guest namespace; this catches a half-made one.
	if g.pod != nil && g.pod.NS > 0 {
		errs = append(errs, plan.InNS(g.pod.NS, func() error {
			if l, err := netlink.LinkByName(g.PodEnd); err == nil {
				return netlink.LinkDel(l)
			}
			return nil
		}))
	}
	return errors.Join(errs...)
}
