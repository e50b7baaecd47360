package plan

import (
	"net/netip"
	"testing"
)

func TestIPNet(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"10.0.2.2/24", "10.0.2.2/24"},
		{"fd10:0:2::2/120", "fd10:0:2::2/120"},
		{"192.168.1.7/32", "192.168.1.7/32"},
	} {
		n := IPNet(netip.MustParsePrefix(c.in))
		if n.String() != c.want {
			t.Errorf("IPNet(%s) = %s, want %s", c.in, n, c.want)
		}
		if ones, bits := n.Mask.Size(); ones != netip.MustParsePrefix(c.in).Bits() || bits != len(n.IP)*8 {
			t.Errorf("IPNet(%s) mask %d/%d for a %d-byte address", c.in, ones, bits, len(n.IP))
		}
	}
}
