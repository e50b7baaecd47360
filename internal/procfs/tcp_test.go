package procfs

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
)

func TestParseTCPAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"020200C0:BC38":                         "192.0.2.2:48184",
		"00000000000000000000000001000000:0016": "[::1]:22",
		"0000000000000000FFFF00000100007F:0050": "127.0.0.1:80",
	} {
		got, err := parseTCPAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("%s: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "01007F:1F90", "0100007F:XYZ", "zz00007F:1F90"} {
		if _, err := parseTCPAddr(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestTCPOwner: the client end of a loopback connection this process made
// is found, owned by this process's user; a connection that is not there
// is an error.
func TestTCPOwner(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network]
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Logf("%s: %v", network, err)
			continue
		}
		defer l.Close()
		c, err := net.Dial(network, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		local := s.RemoteAddr().(*net.TCPAddr).AddrPort()
		remote := s.LocalAddr().(*net.TCPAddr).AddrPort()
		uid, err := TCPOwner("/proc", local, remote)
		if err != nil || uid != uint32(os.Getuid()) {
			t.Errorf("%s: owner of %s -> %s: %d, %v; want %d", network, local, remote, uid, err, os.Getuid())
		}
		gone := netip.AddrPortFrom(local.Addr(), 1)
		if _, err := TCPOwner("/proc", gone, remote); err == nil || !strings.Contains(err.Error(), "no tcp socket") {
			t.Errorf("%s: a socket that is not there: %v", network, err)
		}
	}
}
