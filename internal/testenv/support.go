package testenv

import (
	"net"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// FreeAddr is a loopback address with a port nothing listens on.
func FreeAddr(t testing.TB) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// UnixPair is the two ends of a connected Unix stream socket, as a
// launcher's control connection is; both close with the test.
func UnixPair(t testing.TB) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "control")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// OpenDir makes a 0755 directory in the temp dir that QEMU's and a
// launcher's users can enter (t.TempDir's parent is 0700); it goes with
// the test.
func OpenDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vlstor")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}
