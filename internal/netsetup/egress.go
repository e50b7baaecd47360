package netsetup

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// EgressTable is the nftables table (family ip) RedirectEgress makes.
const EgressTable = "virtlauncher_egress"

// RedirectEgress makes every TCP connection that arrives on iface in the
// namespace ns for an address other than local turn to local's port
// (nftables redirect): a relay listening there reads the address it was
// for (SO_ORIGINAL_DST) and connects to it from elsewhere. Standalone runs
// give their guests a way out like this without any route, rule or
// sysctl of the host changing. Applying it again replaces the rule.
func RedirectEgress(ns netns.NsHandle, iface string, local netip.Addr, port uint16) error {
	if !local.Is4() {
		return fmt.Errorf("egress redirect: %s is not an IPv4 address", local)
	}
	t := &nftables.Table{Name: EgressTable, Family: nftables.TableFamilyIPv4}
	ch := &nftables.Chain{Name: chainPrerouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest}
	p := make([]byte, 2)
	binary.BigEndian.PutUint16(p, port)
	notLocal := matchAddr(true, true, local)
	notLocal[1].(*expr.Cmp).Op = expr.CmpOpNeq
	rule := &nftables.Rule{Table: t, Chain: ch, Exprs: concat(
		matchIfname(expr.MetaKeyIIFNAME, iface),
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		},
		notLocal,
		[]expr.Any{
			&expr.Immediate{Register: 1, Data: p},
			&expr.Redir{RegisterProtoMin: 1},
		},
	)}
	return applyNAT(ns, &natRuleset{Table: t, Chains: []*nftables.Chain{ch}, Rules: []*nftables.Rule{rule}})
}

// RemoveEgress removes what RedirectEgress made in ns, if anything.
func RemoveEgress(ns netns.NsHandle) error {
	return deleteTable(ns, EgressTable, nftables.TableFamilyIPv4)
}
