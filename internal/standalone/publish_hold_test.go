package standalone

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// podServer is a pod network (no guest) whose pod namespace serves body
// on port, standing in for a guest's server.
func podServer(t *testing.T, port uint16, body string) *podTarget {
	t.Helper()
	p, err := podnet.New(podnet.Config{Dir: t.TempDir(), NoIPv6: true})
	if err != nil {
		t.Fatalf("pod network: %v", err)
	}
	t.Cleanup(func() { p.Remove() })
	var l net.Listener
	if err := plan.InNS(p.NS, func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(p.Pod4.Addr(), port).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, body+"\n")
			go func() { io.Copy(io.Discard, c); c.Close() }() // held until the client ends
		}
	}()
	return &podTarget{outside: p.Outside, addr: p.Pod4.Addr()}
}

// TestHeldPorts: a published port keeps its listener from one pod to the
// next; between them a connection is closed at once and one to the old
// pod is ended; each pod gets at most publishLimits.MaxConns at once.
func TestHeldPorts(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	var status lockedBuffer
	h := newHeldPorts(&status)
	defer h.close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	pub := []Publish{{Host: host, GuestPort: 8080}}
	if err := h.bind(pub, 0); err != nil {
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
	h.point(podServer(t, 8080, "first"))
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

	h.unpoint()
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
	if err := h.bind(pub, 0); err != nil {
		t.Errorf("binding the held ports again: %v", err)
	}

	h.point(podServer(t, 8080, "second"))
	if got, err := read(); got != "second" {
		t.Fatalf("the second pod: %q, %v", got, err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range publishLimits.MaxConns + 1 {
		c, err := net.Dial("tcp", host.String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		if i < publishLimits.MaxConns && (err != nil || !strings.HasPrefix(string(b[:n]), "second")) {
			t.Fatalf("connection %d: %q, %v", i, b[:n], err)
		}
		if i == publishLimits.MaxConns && err != io.EOF {
			t.Errorf("connection %d, over the limit: %q, %v, want it closed at once", i, b[:n], err)
		}
	}
	// The relay reports after closing the connection: the line may
	// come a moment after the client saw the close.
	want := fmt.Sprintf("%d connections are relayed already", publishLimits.MaxConns)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(status.String(), want) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(status.String(), want) {
		t.Errorf("no line for the connection over the limit: %q", status.String())
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// controlPair is the two ends of a control connection.
func controlPair(t *testing.T) (a, b *net.UnixConn) {
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

// TestPortsHandedOver: the answer to a completed migration brings the old
// run's published listeners to the new run, which serves them: the port is
// bound all along (after the old run let go of its own, before the new
// one took them), connections that came meanwhile wait in the backlog and
// reach the guest in the new pod.
func TestPortsHandedOver(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	var status lockedBuffer
	pubs := []Publish{{Host: freeAddr(t), GuestPort: 8080}, {Host: freeAddr(t), GuestPort: 8081}}
	old := newHeldPorts(&status)
	defer old.close()
	if err := old.bind(pubs, 0); err != nil {
		t.Fatal(err)
	}
	old.point(podServer(t, 8080, "old"))
	src := &runner{cfg: Config{Publish: pubs, ports: old, Status: &status}}
	a, b := controlPair(t)
	if err := src.replyMigrated(a, controlReply{Message: "done"}); err != nil {
		t.Fatal(err)
	}
	for _, pb := range pubs {
		if old.listener(pb) != nil {
			t.Errorf("%s: the old run still listens after handing it over", pb)
		}
		if l, err := net.Listen("tcp", pb.Host.String()); err == nil {
			l.Close()
			t.Errorf("%s: free between the two runs", pb)
		}
	}
	// A client that comes before the new run serves: it waits.
	early, err := net.DialTimeout("tcp", pubs[0].Host.String(), time.Second)
	if err != nil {
		t.Fatalf("connect while in flight: %v", err)
	}
	defer early.Close()

	rep, err := readReply(b, len(pubs))
	files := rep.files
	if err != nil || rep.dropped != nil || rep.Message != "done" || len(files) != 2 {
		t.Fatalf("the answer: %+v, %d files, %v", rep, len(files), err)
	}
	h := newHeldPorts(&status)
	defer h.close()
	h.point(podServer(t, 8080, "new"))
	if err := h.adopt(pubs, rep.Ports, files); err != nil {
		t.Fatal(err)
	}
	if err := h.bind(pubs, 0); err != nil {
		t.Fatalf("bind after adopting (nothing left to bind): %v", err)
	}
	early.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := bufio.NewReader(early).ReadString('\n'); got != "new\n" {
		t.Errorf("the client that came in between: %q, %v; want the new pod's answer", got, err)
	}
}

// TestAdoptRefuses: what comes as a published listener is checked before
// anything is served from it: a UDP socket, a TCP socket bound but not
// listening, one listening on another port, a regular file, one named for
// a port the run does not publish, and more descriptors than published
// ports are refused, each saying why, and nothing of them is served.
func TestAdoptRefuses(t *testing.T) {
	pb := Publish{Host: freeAddr(t), GuestPort: 22}
	pubs := []Publish{pb}
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
		{"udp", func() *os.File { return socket(unix.SOCK_DGRAM, false, pb.Host) }, pb.recorded(), "not a TCP socket"},
		{"not listening", func() *os.File { return socket(unix.SOCK_STREAM, false, pb.Host) }, pb.recorded(), "not listening"},
		{"another port", func() *os.File { return socket(unix.SOCK_STREAM, true, freeAddr(t)) }, pb.recorded(), "bound to 127.0.0.1:"},
		{"a file", func() *os.File { return regular }, pb.recorded(), "not a socket"},
		{"not published", func() *os.File { return socket(unix.SOCK_STREAM, true, pb.Host) }, "127.0.0.1:1->22/tcp", "not a port this run publishes"},
	} {
		h := newHeldPorts(io.Discard)
		f := tc.f()
		err := h.adopt(pubs, []string{tc.port}, []*os.File{f})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused: %s", tc.name, err, tc.want)
		}
		if h.listener(pb) != nil {
			t.Errorf("%s: served", tc.name)
		}
		if _, err := f.Stat(); err == nil {
			t.Errorf("%s: left open", tc.name)
		}
		h.close()
	}

	// More descriptors than published ports: the answer stands (a
	// completed migration's must), none of them is kept.
	a, b := controlPair(t)
	l1, l2 := socket(unix.SOCK_STREAM, true, freeAddr(t)), socket(unix.SOCK_STREAM, true, freeAddr(t))
	defer l1.Close()
	defer l2.Close()
	msg := `{"message":"done","ports":["x","y"]}` + "\n"
	if _, _, err := a.WriteMsgUnix([]byte(msg), unix.UnixRights(int(l1.Fd()), int(l2.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	rep, err := readReply(b, 1)
	if err != nil || rep.Message != "done" || rep.files != nil || rep.Ports != nil || rep.dropped == nil || !strings.Contains(rep.dropped.Error(), "more descriptors") {
		t.Errorf("two sockets for one published port: %+v, %d files, dropped: %v, %v; want the answer, no socket kept", rep.controlReply, len(rep.files), rep.dropped, err)
	}
	if n := extraCopies(t, l1, l2); n != 0 {
		t.Errorf("%d of the sockets received left open", n)
	}
}

// extraCopies counts this process's descriptors of the sockets files
// other than files' own.
func extraCopies(t *testing.T, files ...*os.File) int {
	t.Helper()
	want := map[string]bool{}
	own := map[string]bool{}
	for _, f := range files {
		fd := strconv.Itoa(int(f.Fd()))
		own[fd] = true
		l, err := os.Readlink("/proc/self/fd/" + fd)
		if err != nil {
			t.Fatal(err)
		}
		want[l] = true
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && want[l] && !own[e.Name()] {
			n++
		}
	}
	return n
}
