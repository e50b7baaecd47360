package unixgrpc

import (
	"context"
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
