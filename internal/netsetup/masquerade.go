package netsetup

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// setupMasquerade makes the masquerade binding's privileged side of one
// interface in the pod namespace: the bridge with the gateway addresses,
// the guest's tap on it, the NAT rules, and the vif cache the DHCP server
// reads. Every step is pushed on u, to be undone if a later one fails.
func setupMasquerade(it plan.Iface, cfg PrivilegedConfig, u *undo) error {
	pod, err := netlink.LinkByName(it.PodIface)
	if err != nil {
		return fmt.Errorf("pod interface %s: %w", it.PodIface, err)
	}
	mtu := pod.Attrs().MTU
	pod4, pod6, err := globalAddrs(pod)
	if err != nil {
		return err
	}
	dual := len(pod6) > 0

	br, err := ensureBridge(it.Bridge, mtu, BridgeMAC, u)
	if err != nil {
		return err
	}
	if dual {
		// The DHCPv6 server answers from the bridge's link-local address;
		// skipping DAD makes it usable as soon as the guest's tap comes up.
		if err := writeSysctl("net/ipv6/conf/"+it.Bridge+"/accept_dad", "0"); err != nil {
			return err
		}
	}
	gw4 := netip.PrefixFrom(it.Gateway4(), it.VMNetwork4.Bits())
	if err := ensureAddr(br, gw4, u); err != nil {
		return err
	}
	if dual {
		gw6 := netip.PrefixFrom(it.Gateway6(), it.VMNetwork6.Bits())
		if err := ensureAddr(br, gw6, u); err != nil {
			return err
		}
	}
	if err := ensureTap(it, mtu, br, cfg, u); err != nil {
		return err
	}
	// Forwarding between eth0 and the bridge; route_localnet lets the
	// output-chain DNAT of 127.0.0.1 leave through the bridge.
	sysctls := map[string]string{
		"net/ipv4/ip_forward":                            "1",
		"net/ipv4/conf/" + it.Bridge + "/route_localnet": "1",
	}
	if dual {
		sysctls["net/ipv6/conf/all/forwarding"] = "1"
	}
	for k, v := range sysctls {
		if err := writeSysctl(k, v); err != nil {
			return err
		}
	}

	rs4, err := buildNAT(natSpec{Family: nftables.TableFamilyIPv4, PodIface: it.PodIface, Bridge: it.Bridge,
		Guest: it.Guest4(), Gateway: it.Gateway4(), PodAddrs: pod4, Ports: it.Ports})
	if err != nil {
		return err
	}
	sets := []*natRuleset{rs4}
	if dual {
		rs6, err := buildNAT(natSpec{Family: nftables.TableFamilyIPv6, PodIface: it.PodIface, Bridge: it.Bridge,
			Guest: it.Guest6(), Gateway: it.Gateway6(), PodAddrs: pod6, Ports: it.Ports})
		if err != nil {
			return err
		}
		sets = append(sets, rs6)
	}
	for _, rs := range sets {
		existed := tableExists(rs.Table.Family)
		if err := applyNAT(0, rs); err != nil {
			return err
		}
		if !existed {
			fam := rs.Table.Family
			u.push(func() error { return deleteNAT(0, fam) })
		}
	}

	mac := it.MAC
	if mac == nil {
		mac = pod.Attrs().HardwareAddr
	}
	c := &plan.VifCache{
		Name:              it.PodIface,
		IP:                netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(it.Guest4(), it.VMNetwork4.Bits()))},
		MAC:               mac,
		AdvertisingIPAddr: net.IP(it.Gateway4().AsSlice()),
		Mtu:               uint16(mtu),
		Gateway:           net.IP(it.Gateway4().AsSlice()),
	}
	if dual {
		c.IPv6 = netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(it.Guest6(), it.VMNetwork6.Bits()))}
		c.AdvertisingIPv6Addr = net.IP(it.Gateway6().AsSlice())
	}
	return putCache(cfg.CacheDir, c, u)
}
