package standalone

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/guestnet/guestnettest"
	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/testnet"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// TestEgressLimit: a guest holding as many egress connections as a VM may
// have gets the next ones closed at once (said on a few lines, not one a
// connection), while the control socket still answers; once one ends, a
// new one gets through.
func TestEgressLimit(t *testing.T) {
	p, _, status := guestnettest.EgressTestPod(t)
	far := testnet.FarHost(t, "VL-FAR-PAGE")
	r := &runner{workDir: t.TempDir(), log: slog.New(slog.DiscardHandler), cfg: session{Config: Config{ReportOptions: ReportOptions{Status: status}}},
		storage: userstorage.NewHeld(vmuser.User{}, status)}
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
		c, err := testnet.DialFromPod(p, far)
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
		c, err := testnet.DialFromPod(p, far)
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
		got, _ := testnet.Fetch(p, far)
		if strings.Contains(got, "VL-FAR-PAGE") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a connection ended and still no new one gets through:\n%s", status.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
