package guestnet_test

import (
	"fmt"
	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/guestnet/guestnettest"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestHeldPorts: a published port keeps its listener from one pod to the
// next; between them a connection is closed at once and one to the old
// pod is ended; each pod gets at most guestnet.PublishLimits.MaxConns at once.
func TestHeldPorts(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	var status testenv.SyncBuffer
	h := guestnet.NewHeldPorts(&status)
	defer h.Close()
	host := testenv.FreeAddr(t)
	pub := []guestnet.Publish{{Host: host, GuestPort: 8080}}
	if err := h.Bind(pub, 0); err != nil {
		t.Fatal(err)
	}
	read := func() (string, error) {
		c, err := net.Dial("tcp", host.String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		return strings.TrimSpace(string(b[:n])), err
	}
	h.Point(guestnettest.PodTestServer(t, 8080, "first"))
	if got, err := read(); got != "first" {
		t.Fatalf("the first pod: %q, %v", got, err)
	}
	held, err := net.Dial("tcp", host.String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}

	h.Unpoint()
	if _, err := held.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection to the pod gone: read %v, want EOF", err)
	}
	if got, err := read(); err != io.EOF {
		t.Errorf("between two pods: %q, %v, want the connection closed at once", got, err)
	}
	if !strings.Contains(status.String(), "the guest is not running") {
		t.Errorf("no line for the connection between two pods: %q", status.String())
	}
	if l, err := net.Listen("tcp", host.String()); err == nil {
		l.Close()
		t.Fatal("between two pods the published port was free")
	}
	if err := h.Bind(pub, 0); err != nil {
		t.Errorf("binding the held ports again: %v", err)
	}

	h.Point(guestnettest.PodTestServer(t, 8080, "second"))
	if got, err := read(); got != "second" {
		t.Fatalf("the second pod: %q, %v", got, err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range guestnet.PublishLimits.MaxConns + 1 {
		c, err := net.Dial("tcp", host.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		if i < guestnet.PublishLimits.MaxConns && (err != nil || !strings.HasPrefix(string(b[:n]), "second")) {
			t.Fatalf("connection %d: %q, %v", i, b[:n], err)
		}
		if i == guestnet.PublishLimits.MaxConns && err != io.EOF {
			t.Errorf("connection %d, over the limit: %q, %v, want it closed at once", i, b[:n], err)
		}
	}
	// The relay reports after closing the connection: the line may
	// come a moment after the client saw the close.
	want := fmt.Sprintf("%d connections are relayed already", guestnet.PublishLimits.MaxConns)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(status.String(), want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(status.String(), want) {
		t.Errorf("no line for the connection over the limit: %q", status.String())
	}
}

// TestAdoptRefuses: what comes as a published listener is checked before
// anything is served from it: a UDP socket, a TCP socket bound but not
// listening, one listening on another port, a regular file, one named for
// a port the run does not publish are refused, each saying why, and
// nothing of them is served.
func TestAdoptRefuses(t *testing.T) {
	pb := guestnet.Publish{Host: testenv.FreeAddr(t), GuestPort: 22}
	pubs := []guestnet.Publish{pb}
	socket := func(typ int, listen bool, at netip.AddrPort) *os.File {
		fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(at.Port()), Addr: at.Addr().As4()}); err != nil {
			t.Fatal(err)
		}
		if listen {
			if err := unix.Listen(fd, 8); err != nil {
				t.Fatal(err)
			}
		}
		return os.NewFile(uintptr(fd), "test socket")
	}
	regular, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    func() *os.File
		port string
		want string
	}{
		{"udp", func() *os.File { return socket(unix.SOCK_DGRAM, false, pb.Host) }, pb.Recorded(), "not a TCP socket"},
		{"not listening", func() *os.File { return socket(unix.SOCK_STREAM, false, pb.Host) }, pb.Recorded(), "not listening"},
		{"another port", func() *os.File { return socket(unix.SOCK_STREAM, true, testenv.FreeAddr(t)) }, pb.Recorded(), "bound to 127.0.0.1:"},
		{"a file", func() *os.File { return regular }, pb.Recorded(), "not a socket"},
		{"not published", func() *os.File { return socket(unix.SOCK_STREAM, true, pb.Host) }, "127.0.0.1:1->22/tcp", "not a port this run publishes"},
	} {
		h := guestnet.NewHeldPorts(io.Discard)
		f := tc.f()
		err := h.Adopt(pubs, []string{tc.port}, []*os.File{f})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused: %s", tc.name, err, tc.want)
		}
		if h.Listener(pb) != nil {
			t.Errorf("%s: served", tc.name)
		}
		if _, err := f.Stat(); err == nil {
			t.Errorf("%s: left open", tc.name)
		}
		h.Close()
	}
}
