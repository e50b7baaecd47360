package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRelay: bytes go both ways and a half-close reaches the far end,
// whose answer still comes back; a failed dial is reported under its name
// and the client sees its connection closed; Close ends what is relayed.
func TestRelay(t *testing.T) {
	far, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	go func() {
		for {
			c, err := far.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the half-close
				c.Write(append([]byte("got "), b...))
			}()
		}
	}()
	failed := make(chan string, 1)
	r := New(func(what string, err error) { failed <- what + ": " + err.Error() })
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	r.Serve(ln, "to far", func(net.Conn) (net.Conn, error) { return net.Dial("tcp", far.Addr().String()) })
	bad, _ := net.Listen("tcp", "127.0.0.1:0")
	r.Serve(bad, "to nowhere", func(net.Conn) (net.Conn, error) { return nil, errors.New("refused") })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("hello"))
	c.(*net.TCPConn).CloseWrite()
	if b, err := io.ReadAll(c); err != nil || string(b) != "got hello" {
		t.Errorf("relayed: %q, %v", b, err)
	}
	c.Close()

	c, _ = net.Dial("tcp", bad.Addr().String())
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a failed dial: read %v, want EOF", err)
	}
	c.Close()
	select {
	case m := <-failed:
		if m != "to nowhere: refused" {
			t.Errorf("reported %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Error("a failed dial was not reported")
	}

	open, _ := net.Dial("tcp", ln.Addr().String())
	defer open.Close()
	time.Sleep(100 * time.Millisecond) // accepted and dialled
	r.Close()
	open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil {
		t.Error("a relayed connection outlived Close")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Error("the listener outlived Close")
	}
}

// echoServer answers every line with itself, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	far, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close() })
	go func() {
		for {
			c, err := far.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return far.Addr().String()
}

// TestRelayLimit: with MaxConns relayed, one more connection is closed at
// once and reported (no more than a Reporter lets through, however many
// come); once one of them ends, the next is relayed again.
func TestRelayLimit(t *testing.T) {
	far := echoServer(t)
	var mu sync.Mutex
	var reports []string
	r := NewLimited(Limits{MaxConns: 3}, func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, what+": "+err.Error())
	})
	defer r.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	r.Serve(ln, "limited", func(net.Conn) (net.Conn, error) { return net.Dial("tcp", far) })
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if err := ping(c, i, 5*time.Second); err != nil {
			t.Fatalf("connection %d of 3: %v", i, err)
		}
	}
	over := 3 * ReportBurst
	for i := range over {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d over the limit: read %v, want it closed at once", i, err)
		}
		c.Close()
	}
	mu.Lock()
	n := len(reports)
	first := ""
	if n > 0 {
		first = reports[0]
	}
	mu.Unlock()
	if n != ReportBurst || !strings.Contains(first, "limited: a connection from 127.0.0.1:") || !strings.Contains(first, "closed at once: 3 connections") {
		t.Errorf("%d connections over the limit made %d reports (want %d), the first %q", over, n, ReportBurst, first)
	}
	held[0].Close()
	held = held[1:]
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if ping(c, 9, time.Second) == nil {
			held = append(held, c)
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("a connection ended and still no new one is relayed")
		}
	}
}

// TestRelayIdle: a connection quiet both ways for Idle is closed; one
// that only carries bytes one way is not.
func TestRelayIdle(t *testing.T) {
	// far sends a byte every 100 ms on each connection, and reads none.
	far, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	go func() {
		for {
			c, err := far.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if _, err := c.Write([]byte{'.'}); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
	}()
	quiet := echoServer(t)
	r := NewLimited(Limits{Idle: 400 * time.Millisecond}, nil)
	defer r.Close()
	busy, _ := net.Listen("tcp", "127.0.0.1:0")
	r.Serve(busy, "busy", func(net.Conn) (net.Conn, error) { return net.Dial("tcp", far.Addr().String()) })
	idle, _ := net.Listen("tcp", "127.0.0.1:0")
	r.Serve(idle, "idle", func(net.Conn) (net.Conn, error) { return net.Dial("tcp", quiet) })

	q, err := net.Dial("tcp", idle.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := ping(q, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	q.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := q.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a quiet connection: read %v, want EOF after the idle time", err)
	} else if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a quiet connection closed after %v, before its idle time", d)
	}

	b, err := net.Dial("tcp", busy.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := 0
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
		n, err := b.Read(make([]byte, 64))
		if err != nil {
			t.Fatalf("a connection carrying bytes one way ended after %v: %v", time.Since(start), err)
		}
		got += n
	}
	if got < 5 {
		t.Errorf("%d bytes in 1.5 s", got)
	}
}

// TestReporter: ReportBurst reports per period, then none, and the next
// one let through says how many were left out.
func TestReporter(t *testing.T) {
	var rep Reporter
	var lines []string
	printf := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	for i := range 3 * ReportBurst {
		rep.Printf(printf, "report %d\n", i)
	}
	if len(lines) != ReportBurst {
		t.Fatalf("%d lines, want %d", len(lines), ReportBurst)
	}
	rep.mu.Lock()
	rep.start = time.Now().Add(-ReportPeriod)
	rep.mu.Unlock()
	rep.Printf(printf, "later\n")
	if want := fmt.Sprintf("later (and %d more reports left out)\n", 2*ReportBurst); lines[len(lines)-1] != want {
		t.Errorf("after the period: %q, want %q", lines[len(lines)-1], want)
	}
}

// TestRelayEndConns: EndConns ends the relayed connections and one whose
// dial was under way, and the listener goes on: the next connection is
// relayed.
func TestRelayEndConns(t *testing.T) {
	far := echoServer(t)
	r := New(nil)
	defer r.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dialing, release := make(chan struct{}, 1), make(chan struct{})
	var slow sync.Once
	r.Serve(ln, "ends", func(net.Conn) (net.Conn, error) {
		g, err := net.Dial("tcp", far)
		first := false
		slow.Do(func() { first = true })
		if !first {
			dialing <- struct{}{}
			<-release
		}
		return g, err
	})
	relayed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer relayed.Close()
	if err := ping(relayed, 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	pending, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer pending.Close()
	<-dialing
	r.EndConns()
	close(release)
	for name, c := range map[string]net.Conn{"relayed": relayed, "dialling": pending} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("the %s connection after EndConns: read %v, want EOF", name, err)
		}
	}
	next, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if err := ping(next, 2, 5*time.Second); err != nil {
		t.Errorf("a connection after EndConns: %v", err)
	}
}
