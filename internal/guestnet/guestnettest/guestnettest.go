// Package guestnettest holds the stand-ins the tests of guestnet and of the
// launcher's run (internal/standalone) share: a pod network with a VM's
// egress relay, and one serving a guest's port. It is for tests only.
package guestnettest

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// EgressTestID stands for a VM's leased id in tests: no account or
// process has it.
const EgressTestID = 1879113000

// EgressTestPod is a pod network (no guest) with the egress relay of a VM
// whose id is EgressTestID; status holds what the relay said. All of it
// goes with the test.
func EgressTestPod(t testing.TB) (*podnet.Pod, *relay.Relay, *testenv.SyncBuffer) {
	t.Helper()
	testenv.Root(t, "creates network namespaces, links, routes and nftables rules, and sockets as another user")
	p, err := podnet.New(podnet.Config{Dir: t.TempDir(), NoIPv6: true})
	if err != nil {
		t.Fatalf("pod network: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Remove(); err != nil {
			t.Errorf("remove the pod network: %v", err)
		}
	})
	status := &testenv.SyncBuffer{}
	rl, err := guestnet.ServeEgress(p, guestnet.IDs{UID: EgressTestID, GID: EgressTestID}, status)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return p, rl, status
}

// PodTestServer is a pod network (no guest) whose pod namespace serves
// body on port, standing in for a guest's server; it goes with the test.
func PodTestServer(t testing.TB, port uint16, body string) *guestnet.PodTarget {
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
