package standalone

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// podServer is a pod network (no guest) whose pod namespace serves body
// on port, standing in for a guest's server.
func podServer(t *testing.T, port uint16, body string) *guestnet.PodTarget {
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
	return &guestnet.PodTarget{Outside: p.Outside, Addr: p.Pod4.Addr()}
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
	var status testenv.SyncBuffer
	pubs := []guestnet.Publish{{Host: freeAddr(t), GuestPort: 8080}, {Host: freeAddr(t), GuestPort: 8081}}
	old := guestnet.NewHeldPorts(&status)
	defer old.Close()
	if err := old.Bind(pubs, 0); err != nil {
		t.Fatal(err)
	}
	old.Point(podServer(t, 8080, "old"))
	src := &runner{cfg: session{Config: Config{Publish: pubs, Status: &status}, ports: old}}
	a, b := controlPair(t)
	if err := src.replyMigrated(a, runctl.Reply{Message: "done"}); err != nil {
		t.Fatal(err)
	}
	for _, pb := range pubs {
		if old.Listener(pb) != nil {
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

	rep, err := runctl.ReadReply(b, len(pubs))
	files := rep.Files
	if err != nil || rep.Dropped != nil || rep.Message != "done" || len(files) != 2 {
		t.Fatalf("the answer: %+v, %d files, %v", rep, len(files), err)
	}
	h := guestnet.NewHeldPorts(&status)
	defer h.Close()
	h.Point(podServer(t, 8080, "new"))
	if err := h.Adopt(pubs, rep.Ports, files); err != nil {
		t.Fatal(err)
	}
	if err := h.Bind(pubs, 0); err != nil {
		t.Fatalf("bind after adopting (nothing left to bind): %v", err)
	}
	early.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := bufio.NewReader(early).ReadString('\n'); got != "new\n" {
		t.Errorf("the client that came in between: %q, %v; want the new pod's answer", got, err)
	}
}
