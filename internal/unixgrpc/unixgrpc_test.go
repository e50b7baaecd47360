package unixgrpc

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestDial: a real gRPC server on a unix socket is reached by its path and
// through another path to the same socket; a missing socket fails within
// the context's deadline, naming the path.
func TestDial(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	defer srv.Stop()

	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, dialPath := range []string{"", "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/s.sock"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := Dial(ctx, sock, dialPath)
		if err != nil {
			cancel()
			t.Fatalf("Dial(%q): %v", dialPath, err)
		}
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("Check through %q: %v", dialPath, err)
		}
		conn.Close()
		cancel()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	missing := filepath.Join(dir, "missing.sock")
	if conn, err := Dial(ctx, missing, ""); err == nil {
		conn.Close()
		t.Fatal("Dial of a missing socket succeeded")
	} else if !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the socket", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Dial of a missing socket took %v", d)
	}
}

// TestDialChecked: the check sees the connection before gRPC uses it; one
// it refuses fails the dial with the check's reason.
func TestDialChecked(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	defer srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	checked := 0
	conn, err := DialChecked(ctx, sock, "", func(c net.Conn) error {
		checked++
		if _, ok := c.(*net.UnixConn); !ok {
			return errors.New("not a unix conn")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("DialChecked accepting: %v", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("Check: %v", err)
	}
	conn.Close()
	if checked != 1 {
		t.Errorf("check ran %d times, want 1", checked)
	}
	conn, err = DialChecked(ctx, sock, "", func(net.Conn) error { return errors.New("wrong listener") })
	if err == nil {
		conn.Close()
		t.Fatal("DialChecked refusing succeeded")
	}
	if !strings.Contains(err.Error(), "wrong listener") {
		t.Errorf("error %q does not give the check's reason", err)
	}
}
