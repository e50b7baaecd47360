package relay

import (
	"errors"
	"io"
	"net"
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
