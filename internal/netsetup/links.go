package netsetup

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

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
	a := &netlink.Addr{IPNet: plan.IPNet(p), Flags: unix.IFA_F_NODAD}
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
