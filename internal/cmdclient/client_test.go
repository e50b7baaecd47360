package cmdclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// TestInterpretation checks the reading rules of kubevirt-wire.md 1.5.
// (The client against the real server is exercised by the cmdserver
// tests.)
func TestInterpretation(t *testing.T) {
	errCases := []struct {
		name         string
		in           error
		disconnected bool
		contains     string
	}{
		{"nil", nil, false, ""},
		{"canceled", status.Error(codes.Canceled, "x"), true, "disconnected"},
		{"eof", io.EOF, true, "disconnected"},
		{"reset", fmt.Errorf("write: %w", syscall.ECONNRESET), true, "disconnected"},
		{"reset in status", status.Error(codes.Unavailable, "read: connection reset by peer"), true, "disconnected"},
		{"unimplemented", status.Error(codes.Unimplemented, "nope"), false, "nope"},
		{"other", status.Error(codes.Unavailable, "refused"), false, "command X failed with Unavailable"},
	}
	for _, c := range errCases {
		got := callError("X", c.in)
		if (got == nil) != (c.in == nil) {
			t.Errorf("%s: got %v", c.name, got)
			continue
		}
		if got == nil {
			continue
		}
		if IsDisconnected(got) != c.disconnected || !strings.Contains(got.Error(), c.contains) {
			t.Errorf("%s: got %v (disconnected=%v)", c.name, got, IsDisconnected(got))
		}
	}
	respCases := []struct {
		r       *cmdv1.Response
		failure bool
	}{
		{nil, false},
		{&cmdv1.Response{Success: true}, false},
		{&cmdv1.Response{Success: false}, false}, // empty message reads as success
		{&cmdv1.Response{Success: false, Message: "bad"}, true},
	}
	for _, c := range respCases {
		if err := responseError("X", c.r); (err != nil) != c.failure {
			t.Errorf("responseError(%v) = %v", c.r, err)
		}
	}
}

func TestDialMissingSocket(t *testing.T) {
	start := time.Now()
	_, err := Dial(context.Background(), filepath.Join(t.TempDir(), "missing"))
	if err == nil {
		t.Fatal("Dial to a missing socket succeeded")
	}
	if d := time.Since(start); d > ConnectTimeout+time.Second {
		t.Errorf("Dial took %v, beyond the connect limit", d)
	}
	if errors.Is(err, context.Canceled) {
		t.Errorf("unexpected: %v", err)
	}
}
