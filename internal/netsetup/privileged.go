package netsetup

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// BridgeMAC is the masquerade bridge's fixed MAC (KubeVirt's).
var BridgeMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0}

// PrivilegedConfig configures the privileged phase.
type PrivilegedConfig struct {
	// QemuUID and QemuGID own the taps, so an unprivileged QEMU can open them.
	QemuUID, QemuGID int
	// CacheDir is the launcher's private dir (layout.Layout.PrivateDir):
	// vif-cache-<podIface>.json goes there, and the restore state too
	// unless StateDir is set.
	CacheDir string
	// StateDir is where the bridge binding's restore state goes
	// (netsetup-state-<podIface>.json). Teardown reads it back as root and
	// restores the pod interface from it, so it belongs in a directory the
	// launcher's user cannot write (vlctl run keeps it in its root-owned
	// work dir). Empty: CacheDir.
	StateDir string
	Plan     plan.PlanOptions
}

// undo collects the reversal of every change one call made, so a failure
// leaves nothing half made.
type undo []func() error

func (u *undo) push(f func() error) { *u = append(*u, f) }

func (u undo) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		if err := u[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetupPrivileged wires every masquerade/bridge interface of the VMI inside
// the pod network namespace podNS (0: the current one). It is idempotent:
// a second run finds everything in place and changes nothing. On error
// every link, address, rule and file this call created is removed again.
func SetupPrivileged(ctx context.Context, podNS netns.NsHandle, vmi *v1.VirtualMachineInstance, cfg PrivilegedConfig, log *slog.Logger) error {
	ifaces, err := plan.PlanFor(vmi, cfg.Plan)
	if err != nil {
		return err
	}
	if cfg.CacheDir == "" {
		return fmt.Errorf("privileged network setup: cache dir not set")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return plan.InNS(podNS, func() error {
		var u undo
		for _, it := range ifaces {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, u.run())
			}
			var err error
			switch it.Binding {
			case plan.BindingMasquerade:
				err = setupMasquerade(it, cfg, &u)
			case plan.BindingBridge:
				err = setupBridge(it, cfg, &u)
			}
			if err != nil {
				if uerr := u.run(); uerr != nil {
					err = fmt.Errorf("%w (rollback: %v)", err, uerr)
				}
				return fmt.Errorf("interface %s (%s binding): %w", it.Name, it.Binding, err)
			}
			log.Info("pod interface wired", "iface", it.Name, "binding", it.Binding,
				"podIface", it.PodIface, "bridge", it.Bridge, "tap", it.Tap)
		}
		return nil
	})
}

// TeardownPrivileged removes every link, address, nftables table and cache
// file SetupPrivileged made for the VMI and gives a bridged pod interface
// back its name, MAC, addresses and routes. Missing pieces are fine, so it
// can run after a partial setup or twice.
func TeardownPrivileged(ctx context.Context, podNS netns.NsHandle, vmi *v1.VirtualMachineInstance, cfg PrivilegedConfig, log *slog.Logger) error {
	ifaces, err := plan.PlanFor(vmi, cfg.Plan)
	if err != nil {
		return err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return plan.InNS(podNS, func() error {
		var errs []error
		masq := false
		for _, it := range ifaces {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := teardownIface(it, cfg); err != nil {
				errs = append(errs, fmt.Errorf("interface %s: %w", it.Name, err))
			}
			masq = masq || it.Binding == plan.BindingMasquerade
		}
		if masq {
			for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
				if err := deleteNAT(0, fam); err != nil {
					errs = append(errs, err)
				}
			}
		}
		log.Info("pod network torn down", "interfaces", len(ifaces), "errors", len(errs))
		return errors.Join(errs...)
	})
}

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
		IP:                netlink.Addr{IPNet: ipnet(netip.PrefixFrom(it.Guest4(), it.VMNetwork4.Bits()))},
		MAC:               mac,
		AdvertisingIPAddr: net.IP(it.Gateway4().AsSlice()),
		Mtu:               uint16(mtu),
		Gateway:           net.IP(it.Gateway4().AsSlice()),
	}
	if dual {
		c.IPv6 = netlink.Addr{IPNet: ipnet(netip.PrefixFrom(it.Guest6(), it.VMNetwork6.Bits()))}
		c.AdvertisingIPv6Addr = net.IP(it.Gateway6().AsSlice())
	}
	return putCache(cfg.CacheDir, c, u)
}

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

func teardownIface(it plan.Iface, cfg PrivilegedConfig) error {
	var errs []error
	if err := delLink(it.Tap, "tuntap"); err != nil {
		errs = append(errs, err)
	}
	if err := delLink(it.Bridge, "bridge"); err != nil {
		errs = append(errs, err)
	}
	if it.Binding == plan.BindingBridge {
		var st bridgeState
		// Never through a link, and never blocking on a FIFO: what is read
		// here is acted on as root.
		b, err := safefs.ReadFile(statePath(cfg, it.PodIface))
		switch {
		case errors.Is(err, os.ErrNotExist):
			// never bridged (or already restored)
		case err != nil:
			errs = append(errs, err)
		default:
			if err := json.Unmarshal(b, &st); err != nil {
				errs = append(errs, fmt.Errorf("parse %s: %w", statePath(cfg, it.PodIface), err))
			} else if err := restorePodNIC(it, st); err != nil {
				errs = append(errs, err)
			} else if err := os.Remove(statePath(cfg, it.PodIface)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := plan.RemoveVifCache(cfg.CacheDir, it.PodIface); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ensureBridge returns the named bridge, creating it (with mac when given)
// if missing; an existing link of another kind is an error.
func ensureBridge(name string, mtu int, mac net.HardwareAddr, u *undo) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err == nil {
		if l.Type() != "bridge" {
			return nil, fmt.Errorf("%s exists and is a %s, not a bridge", name, l.Type())
		}
	} else {
		if !isNotFound(err) {
			return nil, fmt.Errorf("look up %s: %w", name, err)
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu, HardwareAddr: mac}}
		if err := netlink.LinkAdd(br); err != nil {
			return nil, fmt.Errorf("create bridge %s: %w", name, err)
		}
		u.push(func() error { return delLink(name, "bridge") })
		if l, err = netlink.LinkByName(name); err != nil {
			return nil, fmt.Errorf("look up %s: %w", name, err)
		}
	}
	if l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return nil, fmt.Errorf("set MTU %d on %s: %w", mtu, name, err)
		}
	}
	if mac != nil && l.Attrs().HardwareAddr.String() != mac.String() {
		if err := netlink.LinkSetHardwareAddr(l, mac); err != nil {
			return nil, fmt.Errorf("set MAC of %s: %w", name, err)
		}
	}
	if on, err := txChecksum(name, false, false); err != nil {
		return nil, err
	} else if on {
		if _, err := txChecksum(name, true, false); err != nil {
			return nil, err
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(l); err != nil {
			return nil, fmt.Errorf("set %s up: %w", name, err)
		}
	}
	return l, nil
}

// ensureTap creates the persistent tap owned by the QEMU user and puts it
// in the bridge. An existing tap must have the same owner and queue mode.
func ensureTap(it plan.Iface, mtu int, br netlink.Link, cfg PrivilegedConfig, u *undo) error {
	flags := netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR
	if it.Queues > 1 {
		flags |= netlink.TUNTAP_MULTI_QUEUE
	} else {
		flags |= netlink.TUNTAP_ONE_QUEUE
	}
	l, err := netlink.LinkByName(it.Tap)
	if err == nil {
		t, ok := l.(*netlink.Tuntap)
		if !ok || t.Mode != netlink.TUNTAP_MODE_TAP {
			return fmt.Errorf("%s exists and is a %s, not a tap", it.Tap, l.Type())
		}
		if int(t.Owner) != cfg.QemuUID || int(t.Group) != cfg.QemuGID {
			return fmt.Errorf("tap %s exists owned by %d:%d, want %d:%d", it.Tap, t.Owner, t.Group, cfg.QemuUID, cfg.QemuGID)
		}
		if (t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0) != (it.Queues > 1) {
			return fmt.Errorf("tap %s exists with another queue mode", it.Tap)
		}
	} else {
		if !isNotFound(err) {
			return fmt.Errorf("look up %s: %w", it.Tap, err)
		}
		tap := &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: it.Tap},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     flags,
			Owner:     uint32(cfg.QemuUID),
			Group:     uint32(cfg.QemuGID),
		}
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Errorf("create tap %s: %w", it.Tap, err)
		}
		u.push(func() error { return delLink(it.Tap, "tuntap") })
		if l, err = netlink.LinkByName(it.Tap); err != nil {
			return fmt.Errorf("look up %s: %w", it.Tap, err)
		}
	}
	if l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set MTU %d on %s: %w", mtu, it.Tap, err)
		}
	}
	if l.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMaster(l, br); err != nil {
			return fmt.Errorf("enslave %s to %s: %w", it.Tap, br.Attrs().Name, err)
		}
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", it.Tap, err)
		}
	}
	return nil
}

func ensureAddr(l netlink.Link, p netip.Prefix, u *undo) error {
	fam := netlink.FAMILY_V4
	if p.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	have, err := netlink.AddrList(l, fam)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	for _, a := range have {
		if pa, ok := netip.AddrFromSlice(a.IP); ok && pa.Unmap() == p.Addr() {
			ones, _ := a.Mask.Size()
			if ones == p.Bits() {
				return nil
			}
		}
	}
	a := &netlink.Addr{IPNet: ipnet(p), Flags: unix.IFA_F_NODAD}
	if err := netlink.AddrAdd(l, a); err != nil {
		return fmt.Errorf("add %s to %s: %w", p, l.Attrs().Name, err)
	}
	name := l.Attrs().Name
	u.push(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return nil // link already gone
		}
		return netlink.AddrDel(l, a)
	})
	return nil
}

func putCache(dir string, c *plan.VifCache, u *undo) error {
	// Only a regular file counts as an earlier run's cache: anything else
	// (a link planted there) is replaced by ours, which a rollback removes.
	st, err := os.Lstat(plan.CachePath(dir, c.Name))
	existed := err == nil && st.Mode().IsRegular()
	if err := plan.WriteVifCache(dir, c); err != nil {
		return err
	}
	if !existed {
		u.push(func() error { return plan.RemoveVifCache(dir, c.Name) })
	}
	return nil
}

// delLink deletes the named link if it exists and has the given type.
func delLink(name, typ string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if l.Type() != typ {
		return fmt.Errorf("%s is a %s, not a %s: left alone", name, l.Type(), typ)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

func globalAddrs(l netlink.Link) (v4, v6 []netip.Addr, err error) {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
	}
	for _, a := range addrs {
		if !a.IP.IsGlobalUnicast() {
			continue
		}
		pa, _ := netip.AddrFromSlice(a.IP)
		if pa = pa.Unmap(); pa.Is4() {
			v4 = append(v4, pa)
		} else {
			v6 = append(v6, pa)
		}
	}
	return v4, v6, nil
}

func tableExists(fam nftables.TableFamily) bool {
	c, err := nftConn(0)
	if err != nil {
		return false
	}
	_, err = c.ListTableOfFamily(NATTable, fam)
	return err == nil
}

func writeSysctl(key, val string) error {
	p := filepath.Join("/proc/sys", key)
	if err := os.WriteFile(p, []byte(val), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, val, err)
	}
	return nil
}

// writeJSON writes root's own state file atomically, replacing (never
// writing through) whatever is at path: a link planted there by the
// launcher's user gets root nowhere.
func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := safefs.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("network restore state: %w", err)
	}
	return nil
}

func ipnet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

func randomMAC() (net.HardwareAddr, error) {
	m := make(net.HardwareAddr, 6)
	if _, err := rand.Read(m); err != nil {
		return nil, fmt.Errorf("random MAC: %w", err)
	}
	m[0] = (m[0] | 0x02) &^ 0x01 // locally administered, unicast
	return m, nil
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// placeholderType is "dummy" when the kernel can make one (probed with a
// throw-away link), else "bridge": some VM kernels ship without the dummy
// driver, and a bridge without ports holds a name, MAC and addresses as well.
func placeholderType() string {
	probe := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "vlprobe0"}}
	if err := netlink.LinkAdd(probe); err != nil {
		return "bridge"
	}
	_ = netlink.LinkDel(probe)
	return "dummy"
}

func addPlaceholder(name, typ string, attrs netlink.LinkAttrs) (netlink.Link, error) {
	la := netlink.LinkAttrs{Name: name, MTU: attrs.MTU, HardwareAddr: attrs.HardwareAddr}
	var l netlink.Link = &netlink.Dummy{LinkAttrs: la}
	if typ == "bridge" {
		l = &netlink.Bridge{LinkAttrs: la}
	}
	if err := netlink.LinkAdd(l); err != nil {
		return nil, fmt.Errorf("create %s placeholder %s: %w", typ, name, err)
	}
	return netlink.LinkByName(name)
}
