package runctl

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// wireForms are the requests as the vlctl before this package wrote them
// (one object, "op" and the fields the operation fills): every request
// type travels so, and reads back as itself.
var wireForms = []struct {
	req  Request
	wire string
}{
	{AddVolume{Volume: "data", File: "/srv/d.img", Bus: "virtio", Serial: "S1"}, `{"op":"addvolume","volume":"data","file":"/srv/d.img","bus":"virtio","serial":"S1"}`},
	{AddVolume{Volume: "data", File: "/srv/d.img", Bus: "scsi"}, `{"op":"addvolume","volume":"data","file":"/srv/d.img","bus":"scsi"}`},
	{RemoveVolume{Volume: "data"}, `{"op":"removevolume","volume":"data"}`},
	{AddInterface{Interface: "net1", MAC: "02:00:00:00:00:01"}, `{"op":"addinterface","interface":"net1","mac":"02:00:00:00:00:01"}`},
	{RemoveInterface{Interface: "net1"}, `{"op":"removeinterface","interface":"net1"}`},
	{MemoryDump{File: "/tmp/x.core"}, `{"op":"memory-dump","file":"/tmp/x.core"}`},
	{Migrate{Target: "/run/vl/abc", Migration: "7f3c8a52-1c6e-4bd4-9f0e-2b1f0c6d2a11", Bandwidth: "64Mi"}, `{"op":"migrate","target":"/run/vl/abc","migration":"7f3c8a52-1c6e-4bd4-9f0e-2b1f0c6d2a11","bandwidth":"64Mi"}`},
}

func TestWire(t *testing.T) {
	for _, c := range wireForms {
		b, err := json.Marshal(c.req.wire())
		if err != nil || string(b) != c.wire {
			t.Errorf("%T written as %s, %v; want %s", c.req, b, err, c.wire)
		}
		got, err := decode(strings.NewReader(c.wire + "\n"))
		if err != nil || !reflect.DeepEqual(got, c.req) {
			t.Errorf("%s read as %#v, %v; want %#v", c.wire, got, err, c.req)
		}
	}
	// Fields an operation does not use are ignored, as they always were.
	got, err := decode(strings.NewReader(`{"op":"removevolume","volume":"v","file":"/x","target":"/y"}`))
	if err != nil || got != (RemoveVolume{Volume: "v"}) {
		t.Errorf("a request with another operation's fields: %#v, %v", got, err)
	}
}

// TestServe: over a real socket, each request reaches the handler as
// itself, with the requester's pid; an unknown operation and a request
// that does not parse are answered by Serve, naming why, and never reach
// the handler.
func TestServe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the control socket serves root alone")
	}
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the socket: %v, %v; want mode 0600", st.Mode(), err)
	}
	got := make(chan Request, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(ln, func(err error) { t.Errorf("accept: %v", err) }, func(conn *net.UnixConn, pid int, req Request) {
			if pid != os.Getpid() {
				t.Errorf("peer pid %d, want %d", pid, os.Getpid())
			}
			got <- req
			if _, err := WriteReply(conn, Reply{Message: "did " + req.Op()}, nil); err != nil {
				t.Error(err)
			}
		})
	}()
	defer func() { ln.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range wireForms {
		msg, err := Ask(ctx, sock, c.req)
		if err != nil || msg != "did "+c.req.Op() {
			t.Errorf("%T: %q, %v", c.req, msg, err)
			continue
		}
		if r := <-got; !reflect.DeepEqual(r, c.req) {
			t.Errorf("the handler got %#v, want %#v", r, c.req)
		}
	}
	for _, c := range []struct{ raw, want string }{
		{`{"op":"nosuch"}`, `unknown request "nosuch"`},
		{`{"op":`, "bad request"},
	} {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		conn.Write([]byte(c.raw + "\n"))
		if c.raw == `{"op":` {
			conn.(*net.UnixConn).CloseWrite()
		}
		var rep Reply
		err = json.NewDecoder(conn).Decode(&rep)
		conn.Close()
		if err != nil || !strings.Contains(rep.Error, c.want) {
			t.Errorf("%s: answered %+v, %v; want an error naming %q", c.raw, rep, err, c.want)
		}
	}
	select {
	case r := <-got:
		t.Errorf("the handler got %#v", r)
	default:
	}
}
