package cmdserver_test

import (
	"context"
	"testing"
	"time"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
)

// TestGuestAgentRPCsWithoutData: with no agent data (stage 1 has no
// poller), the three RPCs answer as KubeVirt's launcher does from an empty
// agent store (virtwrap/manager.go, cmd-server/server.go): success, with
// KubeVirt's empty JSON, decoded strictly into KubeVirt's own types.
func TestGuestAgentRPCsWithoutData(t *testing.T) {
	c, _ := start(t, &fakeManager{})
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
