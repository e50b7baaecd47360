package standalone

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testnet"
)

// egressTestID stands for a VM's leased id: no account or process has it.
const egressTestID = 1879113000

// egressPod is a pod network (no guest) with the egress relay of a VM
// whose id is egressTestID; status holds what the relay said.
func egressPod(t *testing.T) (*podnet.Pod, *relay.Relay, *testenv.SyncBuffer) {
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
	rl, err := guestnet.ServeEgress(p, guestnet.IDs{UID: egressTestID, GID: egressTestID}, status)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rl.Close)
	return p, rl, status
}

// dialFromPod connects from the pod's namespace, as the guest does.
func dialFromPod(p *podnet.Pod, to netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := plan.InNS(p.NS, func() (err error) {
		c, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	})
	return c, err
}

// fetch asks for / at to from the pod's namespace and returns the answer,
// "" when the connection was closed without one.
func fetch(p *podnet.Pod, to netip.AddrPort) (string, error) {
	c, err := dialFromPod(p, to)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	b, err := io.ReadAll(c)
	return string(b), err
}

// TestEgressLimit: a guest holding as many egress connections as a VM may
// have gets the next ones closed at once (said on a few lines, not one a
// connection), while the control socket still answers; once one ends, a
// new one gets through.
func TestEgressLimit(t *testing.T) {
	p, _, status := egressPod(t)
	far := testnet.FarHost(t, "VL-FAR-PAGE")
	r := &runner{workDir: t.TempDir(), log: slog.New(slog.DiscardHandler), cfg: session{Config: Config{Status: status}}}
	stop, err := r.serveControl(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range guestnet.EgressLimits.MaxConns {
		c, err := dialFromPod(p, far)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	// All are relayed (the far host has them) before the next ones.
	for deadline := time.Now().Add(20 * time.Second); ; {
		owners, err := testnet.TCPOwners(far)
		if err != nil {
			t.Fatal(err)
		}
		if len(owners) == guestnet.EgressLimits.MaxConns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections relayed", len(owners), guestnet.EgressLimits.MaxConns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	over := 3 * relay.ReportBurst
	for i := range over {
		c, err := dialFromPod(p, far)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err != io.EOF {
			t.Fatalf("connection %d over the limit: read %v, want it closed at once", i, err)
		}
	}
	if n := strings.Count(status.String(), "the most allowed"); n != relay.ReportBurst {
		t.Errorf("%d connections over the limit made %d lines, want %d:\n%s", over, n, relay.ReportBurst, status.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := runctl.Ask(ctx, r.controlSocket(), runctl.RemoveVolume{Volume: "nosuch"}); err == nil || !strings.Contains(err.Error(), "not a volume plugged in") {
		t.Errorf("the control socket with egress full: %v, want its answer to a volume never plugged in", err)
	}
	held[0].Close()
	held = held[1:]
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, _ := fetch(p, far)
		if strings.Contains(got, "VL-FAR-PAGE") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection ended and still no new one gets through:\n%s", status.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
