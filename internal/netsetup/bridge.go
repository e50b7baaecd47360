package netsetup

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// bridgeFakeIP is the address the bridge binding's DHCP server answers
// from: 169.254.75.1 followed by the interface index (KubeVirt's scheme).
func bridgeFakeIP(index int) (netip.Prefix, error) {
	a, err := netip.ParseAddr("169.254.75.1" + strconv.Itoa(index))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("bridge fake address for interface index %d: %w", index, err)
	}
	return netip.PrefixFrom(a, 32), nil
}

// bridgeState is what teardown needs to give the pod interface back.
type bridgeState struct {
	// Placeholder is the link type that keeps the pod interface's name:
	// "dummy", or "bridge" (a port-less one) where the kernel has no dummy.
	Placeholder string
	MAC         net.HardwareAddr
	Addrs       []netlink.Addr
	Routes      []netlink.Route
}

func statePath(cfg PrivilegedConfig, podIface string) string {
	dir := cfg.StateDir
	if dir == "" {
		dir = cfg.CacheDir
	}
	return filepath.Join(dir, "netsetup-state-"+podIface+".json")
}

// setupBridge makes the bridge binding's privileged side of one interface:
// the pod interface's MAC, addresses and routes are recorded (the vif
// cache gives them to the guest's DHCP; the saved state lets teardown
// restore them, restorePodNIC), the interface is renamed and joins a
// bridge with the guest's tap, and a placeholder link keeps its old name.
// An interface bridged by an earlier run is reused. Every step is pushed
// on u, to be undone if a later one fails.
func setupBridge(it plan.Iface, cfg PrivilegedConfig, u *undo) error {
	fake, err := bridgeFakeIP(it.Index)
	if err != nil {
		return err
	}
	// Already bridged by an earlier run: the renamed NIC exists.
	if nic, err := netlink.LinkByName(it.NIC); err == nil {
		if _, err := plan.ReadVifCache(cfg.CacheDir, it.PodIface); err != nil {
			return fmt.Errorf("%s exists but %w", it.NIC, err)
		}
		br, err := ensureBridge(it.Bridge, nic.Attrs().MTU, nil, u)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMaster(nic, br); err != nil {
			return fmt.Errorf("enslave %s to %s: %w", it.NIC, it.Bridge, err)
		}
		return ensureTap(it, nic.Attrs().MTU, br, cfg, u)
	}

	pod, err := netlink.LinkByName(it.PodIface)
	if err != nil {
		return fmt.Errorf("pod interface %s: %w", it.PodIface, err)
	}
	attrs := *pod.Attrs()
	addrs, err := netlink.AddrList(pod, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", it.PodIface, err)
	}
	var keep []netlink.Addr // global addresses move to the dummy
	for _, a := range addrs {
		if a.IP.IsGlobalUnicast() {
			keep = append(keep, netlink.Addr{IPNet: a.IPNet, Flags: a.Flags & unix.IFA_F_NODAD})
		}
	}
	routes, err := netlink.RouteList(pod, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("routes of %s: %w", it.PodIface, err)
	}
	var saved, routes4 []netlink.Route
	var gw net.IP
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL || (r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast()) {
			continue // the kernel recreates these with the address
		}
		r.LinkIndex, r.ILinkIndex = 0, 0
		saved = append(saved, r)
		if r.Family == netlink.FAMILY_V4 {
			routes4 = append(routes4, r)
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw != nil && gw == nil {
				gw = r.Gw
			}
		}
	}
	mac := it.MAC
	if mac == nil {
		mac = attrs.HardwareAddr
	}
	c := &plan.VifCache{Name: it.PodIface, MAC: mac, Mtu: uint16(attrs.MTU), Gateway: gw, IPAMDisabled: true}
	for _, a := range keep {
		if a.IP.To4() != nil {
			c.IP = netlink.Addr{IPNet: a.IPNet}
			c.IPAMDisabled = false
			c.AdvertisingIPAddr = net.IP(fake.Addr().AsSlice())
			c.Routes = &routes4
			break
		}
	}
	st := bridgeState{Placeholder: placeholderType(), MAC: attrs.HardwareAddr, Addrs: keep, Routes: saved}
	if err := writeJSON(statePath(cfg, it.PodIface), st); err != nil {
		return err
	}
	u.push(func() error { return os.Remove(statePath(cfg, it.PodIface)) })
	if err := putCache(cfg.CacheDir, c, u); err != nil {
		return err
	}

	br, err := ensureBridge(it.Bridge, attrs.MTU, nil, u)
	if err != nil {
		return err
	}
	// The bridge must not answer ARP for the pod address the dummy keeps:
	// that address now belongs to the guest.
	if err := writeSysctl("net/ipv4/conf/"+it.Bridge+"/arp_ignore", "1"); err != nil {
		return err
	}
	if !c.IPAMDisabled {
		if err := ensureAddr(br, fake, u); err != nil {
			return err
		}
	}

	// Free the pod NIC: no addresses, down, new name and MAC, into the
	// bridge. Addresses go first: a link going down drops its IPv6 ones.
	u.push(func() error { return restorePodNIC(it, st) })
	for _, a := range keep {
		a := a
		if err := netlink.AddrDel(pod, &a); err != nil {
			return fmt.Errorf("remove %s from %s: %w", a.IPNet, it.PodIface, err)
		}
	}
	if err := netlink.LinkSetDown(pod); err != nil {
		return fmt.Errorf("set %s down: %w", it.PodIface, err)
	}
	if err := netlink.LinkSetName(pod, it.NIC); err != nil {
		return fmt.Errorf("rename %s to %s: %w", it.PodIface, it.NIC, err)
	}
	newMAC, err := randomMAC()
	if err != nil {
		return err
	}
	if err := netlink.LinkSetHardwareAddr(pod, newMAC); err != nil {
		return fmt.Errorf("new MAC for %s: %w", it.NIC, err)
	}
	if err := netlink.LinkSetMaster(pod, br); err != nil {
		return fmt.Errorf("enslave %s to %s: %w", it.NIC, it.Bridge, err)
	}
	if err := netlink.LinkSetLearning(pod, false); err != nil {
		return fmt.Errorf("disable learning on %s: %w", it.NIC, err)
	}
	if err := netlink.LinkSetUp(pod); err != nil {
		return fmt.Errorf("set %s up: %w", it.NIC, err)
	}

	// The dummy keeps the pod's name, MAC and addresses, so the pod still
	// reports them (KubeVirt does the same; the launcher reads the MAC here).
	dummy, err := addPlaceholder(it.PodIface, st.Placeholder, attrs)
	if err != nil {
		return err
	}
	u.push(func() error { return delLink(it.PodIface, st.Placeholder) })
	for _, a := range keep {
		a := a
		a.Flags |= unix.IFA_F_NODAD
		if err := netlink.AddrAdd(dummy, &a); err != nil {
			return fmt.Errorf("add %s to dummy %s: %w", a.IPNet, it.PodIface, err)
		}
	}
	if err := netlink.LinkSetUp(dummy); err != nil {
		return fmt.Errorf("set dummy %s up: %w", it.PodIface, err)
	}
	return ensureTap(it, attrs.MTU, br, cfg, u)
}

// restorePodNIC undoes the bridge binding's changes to the pod interface:
// dummy gone, NIC renamed back with its MAC, addresses and routes.
func restorePodNIC(it plan.Iface, st bridgeState) error {
	ph := st.Placeholder
	if ph == "" {
		ph = "dummy"
	}
	if l, err := netlink.LinkByName(it.PodIface); err == nil && l.Type() == ph {
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("delete dummy %s: %w", it.PodIface, err)
		}
	}
	nic, err := netlink.LinkByName(it.NIC)
	if err != nil {
		nic, err = netlink.LinkByName(it.PodIface)
		if err != nil {
			return fmt.Errorf("pod interface %s: %w", it.PodIface, err)
		}
	}
	if err := netlink.LinkSetDown(nic); err != nil {
		return fmt.Errorf("set %s down: %w", nic.Attrs().Name, err)
	}
	if nic.Attrs().MasterIndex != 0 {
		if err := netlink.LinkSetNoMaster(nic); err != nil {
			return fmt.Errorf("release %s: %w", nic.Attrs().Name, err)
		}
	}
	if nic.Attrs().Name != it.PodIface {
		if err := netlink.LinkSetName(nic, it.PodIface); err != nil {
			return fmt.Errorf("rename %s back to %s: %w", it.NIC, it.PodIface, err)
		}
	}
	if err := netlink.LinkSetHardwareAddr(nic, st.MAC); err != nil {
		return fmt.Errorf("restore MAC of %s: %w", it.PodIface, err)
	}
	if err := netlink.LinkSetUp(nic); err != nil {
		return fmt.Errorf("set %s up: %w", it.PodIface, err)
	}
	for _, a := range st.Addrs {
		a := a
		a.Flags |= unix.IFA_F_NODAD
		if err := netlink.AddrReplace(nic, &a); err != nil {
			return fmt.Errorf("restore address %s on %s: %w", a.IPNet, it.PodIface, err)
		}
	}
	for _, r := range st.Routes {
		r := r
		r.LinkIndex = nic.Attrs().Index
		if err := netlink.RouteReplace(&r); err != nil {
			return fmt.Errorf("restore route %s on %s: %w", r, it.PodIface, err)
		}
	}
	return nil
}
