package netsetup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// NATTable is the nftables table (one per family, "ip" and "ip6") that
// holds every rule this package makes. Owning a whole table keeps the pod's
// other rules untouched and makes teardown one delete.
const NATTable = "virtlauncher_nat"

// Chain names; the two regular chains keep KubeVirt's names so a reader of
// `nft list ruleset` recognises them.
const (
	chainPrerouting  = "prerouting"
	chainOutput      = "output"
	chainPostrouting = "postrouting"
	chainPreInbound  = "KUBEVIRT_PREINBOUND"
	chainPostInbound = "KUBEVIRT_POSTINBOUND"
)

// natSpec is everything the masquerade rules of one address family depend on.
type natSpec struct {
	Family   nftables.TableFamily // TableFamilyIPv4 or TableFamilyIPv6
	PodIface string               // where inbound traffic arrives (eth0)
	Bridge   string               // k6t-eth0
	Guest    netip.Addr           // 10.0.2.2
	Gateway  netip.Addr           // 10.0.2.1
	// PodAddrs are the pod interface's own addresses of this family:
	// connections to them from inside the pod are sent to the guest.
	PodAddrs []netip.Addr
	Ports    []plan.Port // empty: every port
}

// natRuleset is the table, its chains and its rules for one family, in the
// order they must be added.
type natRuleset struct {
	Table  *nftables.Table
	Chains []*nftables.Chain
	Rules  []*nftables.Rule
}

// buildNAT generates the masquerade rules, KubeVirt's layout:
//
//	prerouting:  iifname <pod> jump KUBEVIRT_PREINBOUND
//	output:      daddr {127.0.0.1, pod addrs} [proto dport P] dnat to guest
//	postrouting: saddr guest masquerade; oifname <bridge> jump KUBEVIRT_POSTINBOUND
//	PREINBOUND:  [proto dport P] dnat to guest
//	POSTINBOUND: saddr {127.0.0.1, pod addrs} [proto dport P] snat to gateway
//
// The output/POSTINBOUND pair lets a process in the pod reach the guest
// through the pod's own address (or 127.0.0.1, IPv4 only: the kernel never
// routes ::1 off the host).
func buildNAT(s natSpec) (*natRuleset, error) {
	v4 := s.Family == nftables.TableFamilyIPv4
	if !v4 && s.Family != nftables.TableFamilyIPv6 {
		return nil, fmt.Errorf("nat: unsupported family %v", s.Family)
	}
	if s.Guest.Is4() != v4 || s.Gateway.Is4() != v4 {
		return nil, fmt.Errorf("nat: guest %s / gateway %s not of the table's family", s.Guest, s.Gateway)
	}
	t := &nftables.Table{Name: NATTable, Family: s.Family}
	pre := &nftables.Chain{Name: chainPrerouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest}
	out := &nftables.Chain{Name: chainOutput, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest}
	post := &nftables.Chain{Name: chainPostrouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}
	preIn := &nftables.Chain{Name: chainPreInbound, Table: t}
	postIn := &nftables.Chain{Name: chainPostInbound, Table: t}
	rs := &natRuleset{Table: t, Chains: []*nftables.Chain{pre, out, post, preIn, postIn}}
	add := func(c *nftables.Chain, e ...expr.Any) {
		rs.Rules = append(rs.Rules, &nftables.Rule{Table: t, Chain: c, Exprs: e})
	}

	local := append([]netip.Addr(nil), s.PodAddrs...)
	if v4 {
		local = append([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, local...)
	}
	for _, a := range local {
		if a.Is4() != v4 {
			return nil, fmt.Errorf("nat: pod address %s not of the table's family", a)
		}
	}

	add(pre, append(matchIfname(expr.MetaKeyIIFNAME, s.PodIface), jump(chainPreInbound))...)
	add(post, append(matchAddr(v4, false, s.Guest), &expr.Masq{})...)
	add(post, append(matchIfname(expr.MetaKeyOIFNAME, s.Bridge), jump(chainPostInbound))...)

	// nil port: every port; otherwise one rule per declared port.
	ports := []*plan.Port{nil}
	if len(s.Ports) > 0 {
		ports = ports[:0]
		for i := range s.Ports {
			ports = append(ports, &s.Ports[i])
		}
	}
	for _, p := range ports {
		pm := matchPort(p)
		add(preIn, concat(pm, nat(v4, expr.NATTypeDestNAT, s.Guest))...)
		for _, a := range local {
			add(out, concat(matchAddr(v4, true, a), pm, nat(v4, expr.NATTypeDestNAT, s.Guest))...)
			add(postIn, concat(matchAddr(v4, false, a), pm, nat(v4, expr.NATTypeSourceNAT, s.Gateway))...)
		}
	}
	return rs, nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ifnameData is an interface name as nftables compares it: NUL padded to
// IFNAMSIZ.
func ifnameData(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func matchIfname(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameData(name)},
	}
}

// matchAddr matches the source (dst=false) or destination address.
func matchAddr(v4, dst bool, a netip.Addr) []expr.Any {
	var off, l uint32 = 12, 4 // IPv4 saddr
	switch {
	case v4 && dst:
		off = 16
	case !v4 && !dst:
		off, l = 8, 16
	case !v4 && dst:
		off, l = 24, 16
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: l},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
	}
}

// matchPort matches "meta l4proto <p> th dport <n>"; nil matches anything.
func matchPort(p *plan.Port) []expr.Any {
	if p == nil {
		return nil
	}
	proto := byte(unix.IPPROTO_TCP)
	if p.Protocol == "UDP" {
		proto = unix.IPPROTO_UDP
	}
	port := make([]byte, 2)
	binary.BigEndian.PutUint16(port, p.Port)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: port},
	}
}

func nat(v4 bool, typ expr.NATType, to netip.Addr) []expr.Any {
	fam := uint32(unix.NFPROTO_IPV4)
	if !v4 {
		fam = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.NAT{Type: typ, Family: fam, RegAddrMin: 1},
	}
}

func jump(chain string) *expr.Verdict {
	return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain}
}

// applyNAT replaces the family's table with rs in one transaction: the
// table is created if missing, flushed and refilled, so applying the same
// ruleset twice leaves the same rules and a failure leaves the old ones.
func applyNAT(ns netns.NsHandle, rs *natRuleset) error {
	c, err := nftConn(ns)
	if err != nil {
		return err
	}
	t := c.AddTable(rs.Table)
	c.FlushTable(t)
	for _, ch := range rs.Chains {
		c.AddChain(ch)
	}
	for _, r := range rs.Rules {
		c.AddRule(r)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables table %s (family %d): %w", rs.Table.Name, rs.Table.Family, err)
	}
	return nil
}

// deleteNAT removes the family's table if present.
func deleteNAT(ns netns.NsHandle, fam nftables.TableFamily) error {
	return deleteTable(ns, NATTable, fam)
}

// deleteTable removes the table name of family fam if present.
func deleteTable(ns netns.NsHandle, name string, fam nftables.TableFamily) error {
	c, err := nftConn(ns)
	if err != nil {
		return err
	}
	if _, err := c.ListTableOfFamily(name, fam); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("look up nftables table %s: %w", name, err)
	}
	c.DelTable(&nftables.Table{Name: name, Family: fam})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete nftables table %s (family %d): %w", name, fam, err)
	}
	return nil
}

func nftConn(ns netns.NsHandle) (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if ns > 0 {
		opts = append(opts, nftables.WithNetNSFd(int(ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables connection: %w", err)
	}
	return c, nil
}
