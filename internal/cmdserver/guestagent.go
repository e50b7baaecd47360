package cmdserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// GuestAgent is the launcher's record of what the guest agent reported
// (agent.Store is one).
type GuestAgent interface {
	GuestInfo() v1.VirtualMachineInstanceGuestAgentInfo
	Users() []v1.VirtualMachineInstanceGuestOSUser
	Filesystems() []v1.VirtualMachineInstanceFileSystem
}

// WithGuestAgent gives the server the guest agent data its GetGuestInfo,
// GetUsers and GetFilesystems answer from. Without one they answer as
// KubeVirt does before its poller has data.
func WithGuestAgent(a GuestAgent) Option { return func(s *Server) { s.agent = a } }

// The guest-agent RPCs answer what KubeVirt's launcher answers from its
// agent store (virtwrap/manager.go GetGuestInfo, GetUsers, GetFilesystems;
// cmd-server/server.go): always success, with the store's data in
// KubeVirt's JSON shapes, and empty shapes while the store holds nothing,
// which is its answer for an agent that is disconnected or not polled yet.
// virt-handler only calls GetGuestInfo while the Domain reports the
// org.qemu.guest_agent.0 channel connected, and aborts its status update
// on an error, so an error here would freeze the VMI status.

func (c *cmdServer) GetGuestInfo(context.Context, *cmdv1.EmptyRequest) (*cmdv1.GuestInfoResponse, error) {
	data, err := json.Marshal(c.s.agent.GuestInfo())
	if err != nil {
		return &cmdv1.GuestInfoResponse{Response: fail(fmt.Sprintf("encode guest agent info: %v", err))}, nil
	}
	return &cmdv1.GuestInfoResponse{Response: ok(), GuestInfoResponse: string(data)}, nil
}

func (c *cmdServer) GetUsers(context.Context, *cmdv1.EmptyRequest) (*cmdv1.GuestUserListResponse, error) {
	data, err := json.Marshal(c.s.agent.Users())
	if err != nil {
		return &cmdv1.GuestUserListResponse{Response: fail(fmt.Sprintf("encode guest user list: %v", err))}, nil
	}
	return &cmdv1.GuestUserListResponse{Response: ok(), GuestUserListResponse: string(data)}, nil
}

func (c *cmdServer) GetFilesystems(context.Context, *cmdv1.EmptyRequest) (*cmdv1.GuestFilesystemsResponse, error) {
	data, err := json.Marshal(c.s.agent.Filesystems())
	if err != nil {
		return &cmdv1.GuestFilesystemsResponse{Response: fail(fmt.Sprintf("encode guest filesystems: %v", err))}, nil
	}
	return &cmdv1.GuestFilesystemsResponse{Response: ok(), GuestFilesystemsResponse: string(data)}, nil
}

// FreezeVirtualMachine freezes the guest's file systems through its agent
// (virt-freezer, snapshot and backup hooks), with KubeVirt's automatic thaw
// after unfreezeTimeoutSeconds (0: none).
func (c *cmdServer) FreezeVirtualMachine(ctx context.Context, req *cmdv1.FreezeRequest) (*cmdv1.Response, error) {
	timeout := time.Duration(req.GetUnfreezeTimeoutSeconds()) * time.Second
	return c.vmiOp(ctx, "FreezeVirtualMachine", &cmdv1.VMIRequest{Vmi: req.GetVmi()}, func(ctx context.Context, v *v1.VirtualMachineInstance) error {
		return c.s.m.Freeze(ctx, v, timeout)
	})
}

// UnfreezeVirtualMachine thaws the guest's file systems.
func (c *cmdServer) UnfreezeVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "UnfreezeVirtualMachine", req, c.s.m.Unfreeze)
}
