package notify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/notify"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
)

// fast is KubeVirt's policy scaled down 20x (1 s -> 50 ms, 20 s -> 1 s,
// 5 s -> 250 ms) so the tests run quickly.
var fast = notify.Timing{RetryInterval: 50 * time.Millisecond, MaxRetryTime: time.Second, AttemptTimeout: 250 * time.Millisecond}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func dom(i int) *domainjson.Domain {
	d := domainjson.Gone("vm1", "ns1", domainjson.Metadata{UID: "U", GracePeriodSeconds: int64(i)}, time.Unix(0, 0))
	d.Status.Status = domainjson.StatusRunning
	d.Status.Reason = "Unknown"
	return d
}

func setup(t *testing.T, timing notify.Timing) (*notify.Client, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), notify.SocketName)
	c := notify.NewWithTiming(sock, quiet(), timing)
	t.Cleanup(func() { c.Close() })
	return c, sock
}

func startServer(t *testing.T, sock string) *notifytest.Server {
	t.Helper()
	s, err := notifytest.Start(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func TestDeliversDomainAndK8sEvents(t *testing.T) {
	c, sock := setup(t, fast)
	s := startServer(t, sock)
	ctx := context.Background()
	if err := c.SendDomainEvent(ctx, notify.EventAdded, dom(30)); err != nil {
		t.Fatalf("SendDomainEvent: %v", err)
	}
	vmi := notify.VMI{Name: "vm1", Namespace: "ns1", UID: "U"}
	if err := c.SendK8sEvent(ctx, vmi, notify.EventTypeWarning, "IOerror", "VM Paused due to IO error at the volume: disk0"); err != nil {
		t.Fatalf("SendK8sEvent: %v", err)
	}
	ev := s.Events()
	if len(ev) != 2 {
		t.Fatalf("got %d events", len(ev))
	}
	if ev[0].EventType != "ADDED" || ev[0].Domain.Name != "vm1" || ev[0].Domain.Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds != 30 {
		t.Errorf("domain event: %+v", ev[0])
	}
	k := ev[1].K8s
	if k == nil || k.InvolvedObject.Kind != "VirtualMachineInstance" || k.InvolvedObject.APIVersion != "kubevirt.io/v1" ||
		k.InvolvedObject.Name != "vm1" || k.InvolvedObject.Namespace != "ns1" || string(k.InvolvedObject.UID) != "U" ||
		k.Type != "Warning" || k.Reason != "IOerror" || !strings.Contains(k.Message, "disk0") {
		t.Errorf("k8s event: %+v", k)
	}
}

func TestRejectsBadInput(t *testing.T) {
	c, _ := setup(t, fast)
	ctx := context.Background()
	for _, et := range []string{"ERROR", "DELETED", ""} {
		if err := c.SendDomainEvent(ctx, et, dom(1)); err == nil {
			t.Errorf("event type %q accepted", et)
		}
	}
	if err := c.SendDomainEvent(ctx, notify.EventModified, nil); err == nil {
		t.Errorf("nil domain accepted")
	}
	if err := c.SendDomainEvent(ctx, notify.EventModified, domainjson.Gone("", "ns1", domainjson.Metadata{}, time.Now())); err == nil {
		t.Errorf("domain without a name accepted")
	}
	vmi := notify.VMI{Name: "vm1", Namespace: "ns1", UID: "U"}
	if err := c.SendK8sEvent(ctx, vmi, "Error", "r", "m"); err == nil {
		t.Errorf("k8s event type Error accepted")
	}
	if err := c.SendK8sEvent(ctx, notify.VMI{Name: "vm1"}, "Normal", "r", "m"); err == nil {
		t.Errorf("k8s event without namespace/uid accepted")
	}
}

// TestRetryUntilServerAppears: the handler creates the socket only later
// (3 s in real time, scaled to 150 ms); the event is retried and arrives.
func TestRetryUntilServerAppears(t *testing.T) {
	c, sock := setup(t, fast)
	res := c.QueueDomainEvent(notify.EventAdded, dom(1))
	time.Sleep(3 * fast.RetryInterval)
	s := startServer(t, sock)
	if err := <-res; err != nil {
		t.Fatalf("event not delivered after the server appeared: %v", err)
	}
	if n := len(s.Events()); n != 1 {
		t.Errorf("server got %d events, want 1", n)
	}
}

// TestDropAfterMaxRetryTime: with no server the event is dropped after the
// retry time, and the client still delivers later events.
func TestDropAfterMaxRetryTime(t *testing.T) {
	c, sock := setup(t, fast)
	start := time.Now()
	err := c.SendDomainEvent(context.Background(), notify.EventModified, dom(1))
	elapsed := time.Since(start)
	if !errors.Is(err, notify.ErrDropped) {
		t.Fatalf("err = %v, want ErrDropped", err)
	}
	if elapsed < fast.MaxRetryTime-2*fast.RetryInterval || elapsed > fast.MaxRetryTime+2*fast.AttemptTimeout {
		t.Errorf("dropped after %v, want about %v", elapsed, fast.MaxRetryTime)
	}
	s := startServer(t, sock)
	if err := c.SendDomainEvent(context.Background(), notify.EventModified, dom(2)); err != nil {
		t.Fatalf("after a drop: %v", err)
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Domain.Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds != 2 {
		t.Errorf("events after drop: %+v", ev)
	}
}

// TestOrderAcrossServerRestart: events queued while the handler's socket
// disappears and comes back all arrive, in queue order. Delivery is
// at-least-once: an event the old server recorded just before it stopped
// can be resent (harmless, events are upserts), so repeats of the previous
// event are allowed but nothing may be missing or reordered.
func TestOrderAcrossServerRestart(t *testing.T) {
	c, sock := setup(t, fast)
	s1 := startServer(t, sock)
	const n = 40
	var results []<-chan error
	for i := 0; i < n; i++ {
		results = append(results, c.QueueDomainEvent(notify.EventModified, dom(i)))
		if i == n/2 {
			s1.Stop()
		}
	}
	time.Sleep(2 * fast.RetryInterval)
	s2 := startServer(t, sock)
	for i, r := range results {
		if err := <-r; err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	var got, all []int64
	for _, e := range append(s1.Events(), s2.Events()...) {
		v := e.Domain.Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds
		all = append(all, v)
		if len(got) > 0 && got[len(got)-1] == v {
			continue
		}
		got = append(got, v)
	}
	if len(got) != n || len(all) > n+1 {
		t.Fatalf("got %d distinct events (%d in all), want %d: %v", len(got), len(all), n, all)
	}
	for i, v := range got {
		if v != int64(i) {
			t.Fatalf("out of order at %d: %v", i, all)
		}
	}
}

func TestRejectedIsNotRetried(t *testing.T) {
	c, sock := setup(t, fast)
	s := startServer(t, sock)
	s.Reject("vmi not found")
	start := time.Now()
	err := c.SendDomainEvent(context.Background(), notify.EventModified, dom(1))
	if err == nil || errors.Is(err, notify.ErrDropped) || !strings.Contains(err.Error(), "vmi not found") {
		t.Errorf("err = %v, want the handler's rejection", err)
	}
	if time.Since(start) > fast.MaxRetryTime/2 {
		t.Errorf("a rejected event was retried")
	}
}

func TestVersionNegotiation(t *testing.T) {
	c, sock := setup(t, fast)
	s := startServer(t, sock)
	s.SetVersions(2, 3)
	if err := c.SendDomainEvent(context.Background(), notify.EventModified, dom(1)); err == nil ||
		!strings.Contains(err.Error(), "no compatible notify version") {
		t.Errorf("incompatible versions: err = %v", err)
	}
	s.SetVersions(3, 1)
	if err := c.SendDomainEvent(context.Background(), notify.EventModified, dom(1)); err != nil {
		t.Errorf("versions [3 1]: %v", err)
	}
}

func TestCloseFailsPending(t *testing.T) {
	c, _ := setup(t, notify.Timing{RetryInterval: 50 * time.Millisecond, MaxRetryTime: time.Hour, AttemptTimeout: 250 * time.Millisecond})
	r1 := c.QueueDomainEvent(notify.EventModified, dom(1))
	r2 := c.QueueDomainEvent(notify.EventModified, dom(2))
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	for i, r := range []<-chan error{r1, r2} {
		if err := <-r; !errors.Is(err, notify.ErrClosed) {
			t.Errorf("event %d: %v, want ErrClosed", i, err)
		}
	}
	if err := <-c.QueueDomainEvent(notify.EventModified, dom(3)); !errors.Is(err, notify.ErrClosed) {
		t.Errorf("after Close: %v", fmt.Sprint(err))
	}
}

// TestDefaultTimingServerLate uses KubeVirt's real policy: the handler's
// socket appears 3 s after the event was queued.
func TestDefaultTimingServerLate(t *testing.T) {
	c, sock := setup(t, notify.DefaultTiming)
	res := c.QueueDomainEvent(notify.EventAdded, dom(7))
	time.Sleep(3 * time.Second)
	s := startServer(t, sock)
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("not delivered: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not delivered within 2 retry intervals of the server appearing")
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].EventType != "ADDED" {
		t.Errorf("events: %+v", ev)
	}
}
