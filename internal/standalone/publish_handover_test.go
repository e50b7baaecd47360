package standalone

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/guestnet/guestnettest"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestPortsHandedOver: the answer to a completed migration brings the old
// run's published listeners to the new run, which serves them: the port is
// bound all along (after the old run let go of its own, before the new
// one took them), connections that came meanwhile wait in the backlog and
// reach the guest in the new pod.
func TestPortsHandedOver(t *testing.T) {
	testenv.Root(t, "creates network namespaces")
	var status testenv.SyncBuffer
	pubs := []guestnet.Publish{{Host: testenv.FreeAddr(t), GuestPort: 8080}, {Host: testenv.FreeAddr(t), GuestPort: 8081}}
	old := guestnet.NewHeldPorts(&status)
	defer old.Close()
	if err := old.Bind(pubs, 0); err != nil {
		t.Fatal(err)
	}
	old.Point(guestnettest.PodTestServer(t, 8080, "old"))
	src := &runner{cfg: session{Config: Config{NetworkOptions: NetworkOptions{Publish: pubs}, ReportOptions: ReportOptions{Status: &status}}, ports: old}}
	a, b := testenv.UnixPair(t)
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
	h.Point(guestnettest.PodTestServer(t, 8080, "new"))
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
