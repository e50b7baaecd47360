package conformance

import (
	"context"
	"testing"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
)

// guestAgentChannel is the virtio channel KubeVirt gives every guest and
// virt-handler reads for the AgentConnected condition (pkg/virt-handler
// vm.go guestAgentConnected: Target.Name and Target.State "connected").
const guestAgentChannel = "org.qemu.guest_agent.0"

// agentChannelState is the Target.State of the guest agent channel, and
// whether the Domain has that channel at all.
func agentChannelState(d *kvshape.Domain) (string, bool) {
	for _, c := range d.Spec.Devices.Channels {
		if c.Target != nil && c.Target.Name == guestAgentChannel {
			return c.Target.State, true
		}
	}
	return "", false
}

// checkAgentDisconnected: the test guest runs no guest agent, so the
// running Domain reports its channel "disconnected", and the three agent
// RPCs virt-handler calls answer as KubeVirt's launcher does with no agent
// data (virtwrap/manager.go, cmd-server/server.go): success with empty
// JSON, which decodes strictly into KubeVirt's own types.
func checkAgentDisconnected(t *testing.T, h *handler, data string) {
	t.Helper()
	d, err := kvshape.Decode([]byte(data))
	if err != nil {
		t.Fatalf("GetDomain: %v", err)
	}
	if st, ok := agentChannelState(d); !ok {
		t.Errorf("GetDomain has no %s channel; channels %+v", guestAgentChannel, d.Spec.Devices.Channels)
	} else if st != "disconnected" {
		t.Errorf("%s channel state %q, want disconnected (the guest runs no agent)", guestAgentChannel, st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	gi, err := h.cmd.GetGuestInfo(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetGuestInfo", gi.GetResponse(), err); err != nil {
		t.Errorf("%v (KubeVirt answers success without agent data)", err)
	} else if info, err := kvshape.DecodeGuestInfo([]byte(gi.GuestInfoResponse)); err != nil {
		t.Errorf("GetGuestInfo: %v\n%s", err, gi.GuestInfoResponse)
	} else if info.GAVersion != "" || info.Hostname != "" || len(info.SupportedCommands) != 0 || info.Timezone != ", 0" ||
		len(info.UserList) != 0 || len(info.FSInfo.Filesystems) != 0 || info.OS.Name != "" {
		t.Errorf("GetGuestInfo without an agent = %s, want KubeVirt's empty info", gi.GuestInfoResponse)
	}

	us, err := h.cmd.GetUsers(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetUsers", us.GetResponse(), err); err != nil {
		t.Errorf("%v (KubeVirt answers success without agent data)", err)
	} else if users, err := kvshape.DecodeUsers([]byte(us.GuestUserListResponse)); err != nil || users == nil || len(users) != 0 {
		t.Errorf("GetUsers = %q (%v), want KubeVirt's []", us.GuestUserListResponse, err)
	}

	fs, err := h.cmd.GetFilesystems(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetFilesystems", fs.GetResponse(), err); err != nil {
		t.Errorf("%v (KubeVirt answers success without agent data)", err)
	} else if list, err := kvshape.DecodeFilesystems([]byte(fs.GuestFilesystemsResponse)); err != nil || list == nil || len(list) != 0 {
		t.Errorf("GetFilesystems = %q (%v), want KubeVirt's []", fs.GuestFilesystemsResponse, err)
	}
}
