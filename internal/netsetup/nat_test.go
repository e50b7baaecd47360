package netsetup

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// ruleText renders a rule compactly enough to compare in a table.
func ruleText(r *nftables.Rule) string {
	var parts []string
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Meta:
			parts = append(parts, fmt.Sprintf("meta%d", e.Key))
		case *expr.Cmp:
			d := e.Data
			if len(d) == 16 && (d[15] == 0 && d[0] >= 'a') { // interface name
				parts = append(parts, "=="+strings.TrimRight(string(d), "\x00"))
			} else if a, ok := netip.AddrFromSlice(d); ok {
				parts = append(parts, "=="+a.String())
			} else if len(d) == 2 {
				parts = append(parts, fmt.Sprintf("==%d", int(d[0])<<8|int(d[1])))
			} else {
				parts = append(parts, fmt.Sprintf("==%v", d))
			}
		case *expr.Payload:
			parts = append(parts, fmt.Sprintf("payload%d@%d/%d", e.Base, e.Offset, e.Len))
		case *expr.Immediate:
			a, _ := netip.AddrFromSlice(e.Data)
			parts = append(parts, "imm:"+a.String())
		case *expr.NAT:
			parts = append(parts, map[expr.NATType]string{expr.NATTypeDestNAT: "dnat", expr.NATTypeSourceNAT: "snat"}[e.Type])
		case *expr.Masq:
			parts = append(parts, "masq")
		case *expr.Verdict:
			parts = append(parts, "jump:"+e.Chain)
		default:
			parts = append(parts, fmt.Sprintf("%T", e))
		}
	}
	return r.Chain.Name + ": " + strings.Join(parts, " ")
}

func TestBuildNAT(t *testing.T) {
	v4 := natSpec{Family: nftables.TableFamilyIPv4, PodIface: "eth0", Bridge: "k6t-eth0",
		Guest: netip.MustParseAddr("10.0.2.2"), Gateway: netip.MustParseAddr("10.0.2.1"),
		PodAddrs: []netip.Addr{netip.MustParseAddr("192.168.66.2")}}
	v6 := natSpec{Family: nftables.TableFamilyIPv6, PodIface: "eth0", Bridge: "k6t-eth0",
		Guest: netip.MustParseAddr("fd10:0:2::2"), Gateway: netip.MustParseAddr("fd10:0:2::1"),
		PodAddrs: []netip.Addr{netip.MustParseAddr("fd00:66::2")}}
	withPorts := func(s natSpec, p ...plan.Port) natSpec { s.Ports = p; return s }

	common4 := []string{
		"prerouting: meta6 ==eth0 jump:KUBEVIRT_PREINBOUND",
		"postrouting: payload1@12/4 ==10.0.2.2 masq",
		"postrouting: meta7 ==k6t-eth0 jump:KUBEVIRT_POSTINBOUND",
	}
	for _, tc := range []struct {
		name string
		spec natSpec
		want []string
	}{
		{"v4 all ports", v4, append(common4,
			"KUBEVIRT_PREINBOUND: imm:10.0.2.2 dnat",
			"output: payload1@16/4 ==127.0.0.1 imm:10.0.2.2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@12/4 ==127.0.0.1 imm:10.0.2.1 snat",
			"output: payload1@16/4 ==192.168.66.2 imm:10.0.2.2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@12/4 ==192.168.66.2 imm:10.0.2.1 snat",
		)},
		{"v4 declared ports", withPorts(v4, plan.Port{Protocol: "TCP", Port: 80}, plan.Port{Protocol: "UDP", Port: 53}), append(common4,
			"KUBEVIRT_PREINBOUND: meta16 ==[6] payload2@2/2 ==80 imm:10.0.2.2 dnat",
			"output: payload1@16/4 ==127.0.0.1 meta16 ==[6] payload2@2/2 ==80 imm:10.0.2.2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@12/4 ==127.0.0.1 meta16 ==[6] payload2@2/2 ==80 imm:10.0.2.1 snat",
			"output: payload1@16/4 ==192.168.66.2 meta16 ==[6] payload2@2/2 ==80 imm:10.0.2.2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@12/4 ==192.168.66.2 meta16 ==[6] payload2@2/2 ==80 imm:10.0.2.1 snat",
			"KUBEVIRT_PREINBOUND: meta16 ==[17] payload2@2/2 ==53 imm:10.0.2.2 dnat",
			"output: payload1@16/4 ==127.0.0.1 meta16 ==[17] payload2@2/2 ==53 imm:10.0.2.2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@12/4 ==127.0.0.1 meta16 ==[17] payload2@2/2 ==53 imm:10.0.2.1 snat",
			"output: payload1@16/4 ==192.168.66.2 meta16 ==[17] payload2@2/2 ==53 imm:10.0.2.2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@12/4 ==192.168.66.2 meta16 ==[17] payload2@2/2 ==53 imm:10.0.2.1 snat",
		)},
		{"v6 all ports (no ::1)", v6, []string{
			"prerouting: meta6 ==eth0 jump:KUBEVIRT_PREINBOUND",
			"postrouting: payload1@8/16 ==fd10:0:2::2 masq",
			"postrouting: meta7 ==k6t-eth0 jump:KUBEVIRT_POSTINBOUND",
			"KUBEVIRT_PREINBOUND: imm:fd10:0:2::2 dnat",
			"output: payload1@24/16 ==fd00:66::2 imm:fd10:0:2::2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@8/16 ==fd00:66::2 imm:fd10:0:2::1 snat",
		}},
		{"v6 declared port", withPorts(v6, plan.Port{Protocol: "TCP", Port: 22}), []string{
			"prerouting: meta6 ==eth0 jump:KUBEVIRT_PREINBOUND",
			"postrouting: payload1@8/16 ==fd10:0:2::2 masq",
			"postrouting: meta7 ==k6t-eth0 jump:KUBEVIRT_POSTINBOUND",
			"KUBEVIRT_PREINBOUND: meta16 ==[6] payload2@2/2 ==22 imm:fd10:0:2::2 dnat",
			"output: payload1@24/16 ==fd00:66::2 meta16 ==[6] payload2@2/2 ==22 imm:fd10:0:2::2 dnat",
			"KUBEVIRT_POSTINBOUND: payload1@8/16 ==fd00:66::2 meta16 ==[6] payload2@2/2 ==22 imm:fd10:0:2::1 snat",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := buildNAT(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if rs.Table.Name != NATTable || rs.Table.Family != tc.spec.Family || len(rs.Chains) != 5 {
				t.Errorf("table %+v with %d chains", rs.Table, len(rs.Chains))
			}
			var got []string
			for _, r := range rs.Rules {
				got = append(got, ruleText(r))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestBuildNATRejectsMixedFamilies(t *testing.T) {
	_, err := buildNAT(natSpec{Family: nftables.TableFamilyIPv6, Guest: netip.MustParseAddr("10.0.2.2"),
		Gateway: netip.MustParseAddr("10.0.2.1")})
	if err == nil {
		t.Error("IPv4 guest in an ip6 table accepted")
	}
	_, err = buildNAT(natSpec{Family: nftables.TableFamilyIPv4, Guest: netip.MustParseAddr("10.0.2.2"),
		Gateway: netip.MustParseAddr("10.0.2.1"), PodAddrs: []netip.Addr{netip.MustParseAddr("fd00::1")}})
	if err == nil {
		t.Error("IPv6 pod address in an ip table accepted")
	}
}
