package cmdserver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
)

// TestGuestAgentRPCsWithoutData: with no agent data (no agent, or not
// polled yet), the three RPCs answer as KubeVirt's launcher does from an empty
// agent store (virtwrap/manager.go, cmd-server/server.go): success, with
// KubeVirt's empty JSON, decoded strictly into KubeVirt's own types.
func TestGuestAgentRPCsWithoutData(t *testing.T) {
	c, _ := start(t, &cmdservertest.Fake{})
	cmd := cmdv1.NewCmdClient(c.Conn())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cases := []struct {
		rpc  string
		call func() (*cmdv1.Response, string, error)
		want string
		// decode checks the JSON against KubeVirt's types and that it holds no data.
		decode func([]byte) (empty bool, err error)
	}{
		{
			rpc: "GetGuestInfo",
			call: func() (*cmdv1.Response, string, error) {
				r, err := cmd.GetGuestInfo(ctx, &cmdv1.EmptyRequest{})
				return r.GetResponse(), r.GetGuestInfoResponse(), err
			},
			want: `{"os":{},"timezone":", 0","fsInfo":{"disks":null}}`,
			decode: func(b []byte) (bool, error) {
				g, err := kvshape.DecodeGuestInfo(b)
				return err == nil && g.GAVersion == "" && len(g.SupportedCommands) == 0 && g.Hostname == "" &&
					len(g.UserList) == 0 && len(g.FSInfo.Filesystems) == 0 && g.FSFreezeStatus == "", err
			},
		},
		{
			rpc: "GetUsers",
			call: func() (*cmdv1.Response, string, error) {
				r, err := cmd.GetUsers(ctx, &cmdv1.EmptyRequest{})
				return r.GetResponse(), r.GetGuestUserListResponse(), err
			},
			want: `[]`,
			decode: func(b []byte) (bool, error) {
				u, err := kvshape.DecodeUsers(b)
				return u != nil && len(u) == 0, err
			},
		},
		{
			rpc: "GetFilesystems",
			call: func() (*cmdv1.Response, string, error) {
				r, err := cmd.GetFilesystems(ctx, &cmdv1.EmptyRequest{})
				return r.GetResponse(), r.GetGuestFilesystemsResponse(), err
			},
			want: `[]`,
			decode: func(b []byte) (bool, error) {
				f, err := kvshape.DecodeFilesystems(b)
				return f != nil && len(f) == 0, err
			},
		},
	}
	for _, tc := range cases {
		resp, body, err := tc.call()
		if err != nil || !resp.GetSuccess() || resp.GetMessage() != "" {
			t.Errorf("%s: response %+v, err %v; want success", tc.rpc, resp, err)
			continue
		}
		if body != tc.want {
			t.Errorf("%s: JSON %s, want KubeVirt's %s", tc.rpc, body, tc.want)
		}
		if empty, err := tc.decode([]byte(body)); err != nil || !empty {
			t.Errorf("%s: decode %s: empty=%v err=%v", tc.rpc, body, empty, err)
		}
	}
}

// TestExecAndGuestPing: the probe RPCs map the Manager's results the way
// KubeVirt's server does: a command that ran answers success with its
// exit code and output (non-zero included); any other failure, and a
// failed ping, is a gRPC error carrying the reason.
func TestExecAndGuestPing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		out      string
		err      error
		wantCode int32
		wantErr  string
	}{
		{name: "exit 0", out: "hi\n"},
		{name: "exit 3", out: "half", err: fmt.Errorf("wrapped: %w", agent.ExitError{Code: 3}), wantCode: 3},
		{name: "no agent", err: errors.New("Guest agent is not responding: QEMU guest agent is not connected"), wantErr: "not connected"},
	} {
		m := &cmdservertest.Fake{FakeAgent: cmdservertest.FakeAgent{Agent: true, ExecOut: tc.out, ExecErr: tc.err}}
		c, _ := start(t, m)
		cmd := cmdv1.NewCmdClient(c.Conn())
		r, err := cmd.Exec(ctx, &cmdv1.ExecRequest{DomainName: "ns1_vm1", Command: "/bin/echo", Args: []string{"a", "b"}, TimeoutSeconds: 2})
		if tc.wantErr != "" {
			if status.Code(err) != codes.Unknown || !strings.Contains(status.Convert(err).Message(), tc.wantErr) {
				t.Errorf("%s: Exec err %v, want gRPC Unknown with %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !r.GetResponse().GetSuccess() || r.ExitCode != tc.wantCode || r.StdOut != tc.out {
			t.Errorf("%s: Exec = %+v, %v; want success, exit code %d, output %q", tc.name, r, err, tc.wantCode, tc.out)
		}
		if got := strings.Join(m.ExecArgs, " "); got != "ns1_vm1 /bin/echo 2s a b" {
			t.Errorf("%s: the manager got %q", tc.name, got)
		}
	}

	m := &cmdservertest.Fake{FakeAgent: cmdservertest.FakeAgent{Agent: true}}
	c, _ := start(t, m)
	cmd := cmdv1.NewCmdClient(c.Conn())
	if r, err := cmd.GuestPing(ctx, &cmdv1.GuestPingRequest{DomainName: "ns1_vm1", TimeoutSeconds: 1}); err != nil || !r.GetResponse().GetSuccess() {
		t.Errorf("GuestPing = %+v, %v; want success", r, err)
	}
	m.PingErr = errors.New("guest agent ping: agent gone")
	if _, err := cmd.GuestPing(ctx, &cmdv1.GuestPingRequest{DomainName: "ns1_vm1", TimeoutSeconds: 1}); status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "agent gone") {
		t.Errorf("failing GuestPing: %v, want gRPC Unknown with the reason", err)
	}
}
