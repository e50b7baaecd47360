package cmdserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

// heldConn is a client's socket that counts what it writes and, once
// holdAt bytes are written, holds further writes until released: a client
// whose message stalls midway, as the server sees it.
type heldConn struct {
	net.Conn
	mu      sync.Mutex
	written int64
	holdAt  int64 // 0: never hold
	held    chan struct{}
	release chan struct{}
}

func (c *heldConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	hold := c.holdAt > 0 && c.written >= c.holdAt
	c.mu.Unlock()
	if hold {
		select {
		case c.held <- struct{}{}:
		default:
		}
		<-c.release
	}
	// Counted before the write: the server may answer before a write
	// returns to the client.
	c.mu.Lock()
	c.written += int64(len(b))
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *heldConn) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

// holdAfter holds writes once n more bytes are written.
func (c *heldConn) holdAfter(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdAt = c.written + n
}

// dialHeld connects a raw Cmd client to sock through a heldConn.
func dialHeld(t *testing.T, sock string) (cmdv1.CmdClient, *heldConn) {
	t.Helper()
	hc := &heldConn{held: make(chan struct{}, 1), release: make(chan struct{})}
	var once sync.Once
	cc, err := grpc.NewClient("passthrough:///launcher",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", sock)
			if err != nil {
				return nil, err
			}
			once.Do(func() { hc.Conn = c })
			return hc, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-hc.release:
		default:
			close(hc.release)
		}
		cc.Close()
	})
	cl := cmdv1.NewCmdClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.Ping(ctx, &cmdv1.EmptyRequest{}); err != nil {
		t.Fatalf("Ping through the held connection: %v", err)
	}
	return cl, hc
}

// bigVMIRequest is a VMIRequest whose VMI JSON is about size bytes (an
// annotation makes up the size).
func bigVMIRequest(t *testing.T, size int) *cmdv1.VMIRequest {
	t.Helper()
	v := testVMI()
	v.Annotations = map[string]string{"big": strings.Repeat("a", size-256)}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: js}}
}

// TestVMICallRefusedUnread: with MaxVMICalls calls in flight, one more
// carrying a message at the size limit is refused with ResourceExhausted
// before the server reads it: the client gets to send no more than the
// call's flow-control window, not the 4 MiB (which the server would
// otherwise receive, copy and decode before refusing).
func TestVMICallRefusedUnread(t *testing.T) {
	m := &cmdservertest.Fake{SyncGate: make(chan struct{}), SyncIn: make(chan struct{}, cmdserver.MaxVMICalls)}
	c, sock := start(t, m)
	done := make(chan error, cmdserver.MaxVMICalls)
	for range cmdserver.MaxVMICalls {
		go func() { done <- c.Sync(context.Background(), testVMI(), nil) }()
	}
	for range cmdserver.MaxVMICalls {
		<-m.SyncIn
	}
	raw, hc := dialHeld(t, sock)
	req := bigVMIRequest(t, cmdserver.MaxMessageSize-1024)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := hc.total()
	_, err := raw.SyncVirtualMachine(ctx, req)
	sent := hc.total() - before
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Sync beyond the bound: %v, want ResourceExhausted", err)
	}
	if sent > 1<<20 {
		t.Errorf("the refused call sent %d bytes of its %d-byte message: the server read it", sent, len(req.Vmi.VmiJson))
	}
	t.Logf("refused call: %d bytes sent of a %d-byte message", sent, len(req.Vmi.VmiJson))
	close(m.SyncGate)
	for range cmdserver.MaxVMICalls {
		if err := <-done; err != nil {
			t.Errorf("a Sync within the bound: %v", err)
		}
	}
}

// TestOneDecodeAtATime: while one call's message is still arriving (its
// client stalls after 256 KiB of 2 MiB), another call carrying a VMI waits
// for it and fails with its own deadline without reaching the Manager;
// Ping is not held up. Once the first message has arrived both kinds of
// call go through.
func TestOneDecodeAtATime(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, sock := start(t, m)
	slow, hc := dialHeld(t, sock)
	hc.holdAfter(256 << 10)
	slowDone := make(chan error, 1)
	big := bigVMIRequest(t, 2<<20)
	go func() {
		resp, err := slow.SyncVirtualMachine(context.Background(), big)
		if err == nil && !resp.Success {
			err = status.Error(codes.Unknown, resp.Message)
		}
		slowDone <- err
	}()
	select {
	case <-hc.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the large message was never read past its flow-control window")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := c.Sync(ctx, testVMI(), nil)
	if !strings.Contains(fmt.Sprint(err), "DeadlineExceeded") {
		t.Errorf("Sync while another message is read: %v, want DeadlineExceeded", err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	if err := c.Ping(pctx); err != nil {
		t.Errorf("Ping while a message is read: %v", err)
	}
	calls := len(m.Calls())
	if calls != 0 {
		t.Errorf("the Manager was called while the first message was still arriving: %+v", m.Ops)
	}
	close(hc.release)
	if err := <-slowDone; err != nil {
		t.Errorf("the stalled Sync, once its message arrived: %v", err)
	}
	if err := c.Sync(context.Background(), testVMI(), nil); err != nil {
		t.Errorf("Sync after the large one: %v", err)
	}
}

// TestMessageArrivalBound: a call with a distant deadline whose message stalls
// midway fails once the arrival bound passes (DeadlineExceeded, while its
// client is still stalled), and gives the decode slot back: the next Sync
// goes through at once.
func TestMessageArrivalBound(t *testing.T) {
	m := &cmdservertest.Fake{}
	const bound = 500 * time.Millisecond
	c, sock := startWith(t, m, cmdserver.WithoutSyncValidation(), cmdserver.WithMessageArrival(bound))
	slow, hc := dialHeld(t, sock)
	hc.holdAfter(256 << 10)
	// The caller's own deadline is far beyond the bound: only the server
	// can end the call in time.
	sctx, scancel := context.WithTimeout(context.Background(), bound+10*time.Second)
	defer scancel()
	t0 := time.Now()
	_, err := slow.SyncVirtualMachine(sctx, bigVMIRequest(t, 2<<20))
	took := time.Since(t0)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(fmt.Sprint(err), "did not arrive") {
		t.Errorf("stalled Sync: %v, want DeadlineExceeded saying the message did not arrive", err)
	}
	if took < bound || took > bound+5*time.Second {
		t.Errorf("stalled Sync answered after %v, want about %v", took, bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Sync(ctx, testVMI(), nil); err != nil {
		t.Errorf("Sync after the stalled one was refused: %v", err)
	}
}
