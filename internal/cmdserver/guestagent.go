package cmdserver

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// The guest-agent RPCs answer what KubeVirt's launcher answers from its
// agent store (virtwrap/manager.go GetGuestInfo, GetUsers, GetFilesystems;
// cmd-server/server.go): always success, with the store's data in
// KubeVirt's JSON shapes, and empty shapes while the store holds nothing,
// which is its answer for an agent that is disconnected or not polled yet.
// virt-handler only calls GetGuestInfo while the Domain reports the
// org.qemu.guest_agent.0 channel connected, and aborts its status update
// on an error, so an error here would freeze the VMI status.
//
// Issue 15 stage 1 has no agent poller: the store is always empty, so
// these are KubeVirt's disconnected answers. Stage 2 (the agent poller,
// guest-info, guest-get-users, guest-get-fsinfo, ...) fills the data.

// emptyGuestInfo is KubeVirt's GuestAgentInfo with no agent data. Its
// timezone is not empty: KubeVirt formats the zone and offset of an empty
// record as "<zone>, <offset>", giving ", 0".
func emptyGuestInfo() v1.VirtualMachineInstanceGuestAgentInfo {
	return v1.VirtualMachineInstanceGuestAgentInfo{Timezone: fmt.Sprintf("%s, %d", "", 0)}
}

func (c *cmdServer) GetGuestInfo(context.Context, *cmdv1.EmptyRequest) (*cmdv1.GuestInfoResponse, error) {
	data, err := json.Marshal(emptyGuestInfo())
	if err != nil {
		return &cmdv1.GuestInfoResponse{Response: fail(fmt.Sprintf("encode guest agent info: %v", err))}, nil
	}
	return &cmdv1.GuestInfoResponse{Response: ok(), GuestInfoResponse: string(data)}, nil
}

func (c *cmdServer) GetUsers(context.Context, *cmdv1.EmptyRequest) (*cmdv1.GuestUserListResponse, error) {
	// KubeVirt starts from an empty, non-nil list: "[]", never "null".
	data, err := json.Marshal([]v1.VirtualMachineInstanceGuestOSUser{})
	if err != nil {
		return &cmdv1.GuestUserListResponse{Response: fail(fmt.Sprintf("encode guest user list: %v", err))}, nil
	}
	return &cmdv1.GuestUserListResponse{Response: ok(), GuestUserListResponse: string(data)}, nil
}

func (c *cmdServer) GetFilesystems(context.Context, *cmdv1.EmptyRequest) (*cmdv1.GuestFilesystemsResponse, error) {
	data, err := json.Marshal([]v1.VirtualMachineInstanceFileSystem{})
	if err != nil {
		return &cmdv1.GuestFilesystemsResponse{Response: fail(fmt.Sprintf("encode guest filesystems: %v", err))}, nil
	}
	return &cmdv1.GuestFilesystemsResponse{Response: ok(), GuestFilesystemsResponse: string(data)}, nil
}
