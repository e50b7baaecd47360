package api_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	notifyv1 "github.com/virtlauncher/virtlauncher/api/notify/v1"
	"github.com/virtlauncher/virtlauncher/api/notifyinfo"
)

// TestMethodPaths checks the method paths virt-handler dials: they carry
// the proto package names, which must be KubeVirt's.
func TestMethodPaths(t *testing.T) {
	cases := map[string]string{
		cmdinfo.CmdInfo_Info_FullMethodName:              "/kubevirt.cmd.info.CmdInfo/Info",
		cmdv1.Cmd_SyncVirtualMachine_FullMethodName:      "/kubevirt.cmd.v1.Cmd/SyncVirtualMachine",
		cmdv1.Cmd_DeleteVirtualMachine_FullMethodName:    "/kubevirt.cmd.v1.Cmd/DeleteVirtualMachine",
		cmdv1.Cmd_GetVMStats_FullMethodName:              "/kubevirt.cmd.v1.Cmd/GetVMStats",
		notifyinfo.NotifyInfo_Info_FullMethodName:        "/kubevirt.notify.info.NotifyInfo/Info",
		notifyv1.Notify_HandleDomainEvent_FullMethodName: "/kubevirt.notify.v1.Notify/HandleDomainEvent",
		notifyv1.Notify_HandleK8SEvent_FullMethodName:    "/kubevirt.notify.v1.Notify/HandleK8sEvent",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("method path %q, want %q", got, want)
		}
	}
	if n := len(cmdv1.Cmd_ServiceDesc.Methods); n != 36 {
		t.Errorf("Cmd has %d RPCs, want 36", n)
	}
}

// TestEncoding compares encodings with bytes worked out by hand from the
// field numbers and types of kubevirt-wire.md 1.4 and 2.2.
func TestEncoding(t *testing.T) {
	cases := []struct {
		name string
		msg  proto.Message
		want []byte
	}{
		{"Response", &cmdv1.Response{Success: true, Message: "ab"},
			[]byte{0x08, 0x01, 0x12, 0x02, 'a', 'b'}},
		{"CmdInfoResponse packed", &cmdinfo.CmdInfoResponse{SupportedCmdVersions: []uint32{1, 2}},
			[]byte{0x0a, 0x02, 0x01, 0x02}},
		{"NotifyInfoResponse packed", &notifyinfo.NotifyInfoResponse{SupportedNotifyVersions: []uint32{1}},
			[]byte{0x0a, 0x01, 0x01}},
		{"CPU siblings packed", &cmdv1.CPU{Id: 3, Siblings: []uint32{4, 5}},
			[]byte{0x08, 0x03, 0x12, 0x02, 0x04, 0x05}},
		{"VMIRequest", &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: []byte("{}")}, Options: &cmdv1.VirtualMachineOptions{MemBalloonStatsPeriod: 10}},
			[]byte{0x0a, 0x04, 0x0a, 0x02, '{', '}', 0x12, 0x02, 0x10, 0x0a}},
		{"ClusterConfig field 7", &cmdv1.ClusterConfig{GraceIOVirtualizationEnabled: true},
			[]byte{0x38, 0x01}},
		{"GraceHostDeviceAliases field 11", &cmdv1.VirtualMachineOptions{GraceHostDeviceAliases: []string{"x"}},
			[]byte{0x5a, 0x01, 'x'}},
		{"ExecResponse", &cmdv1.ExecResponse{ExitCode: 2, StdOut: "o"},
			[]byte{0x10, 0x02, 0x1a, 0x01, 'o'}},
		{"VMStatsResponse field 18", &cmdv1.VMStatsResponse{GuestGetMemoryBlocks: &cmdv1.Response{}},
			[]byte{0x92, 0x01, 0x00}},
		{"DomainEventRequest", &notifyv1.DomainEventRequest{DomainJSON: []byte("d"), EventType: "ADDED"},
			[]byte{0x0a, 0x01, 'd', 0x1a, 0x05, 'A', 'D', 'D', 'E', 'D'}},
		{"K8sEventRequest", &notifyv1.K8SEventRequest{EventJSON: []byte("e")},
			[]byte{0x0a, 0x01, 'e'}},
	}
	for _, c := range cases {
		got, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
		if err != nil {
			t.Fatalf("%s: marshal: %v", c.name, err)
		}
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: encoded % x, want % x", c.name, got, c.want)
		}
	}
}
