package api_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	hooksinfo "github.com/virtlauncher/virtlauncher/api/hooks/info"
	hooksv1alpha1 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha1"
	hooksv1alpha2 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha2"
	hooksv1alpha3 "github.com/virtlauncher/virtlauncher/api/hooks/v1alpha3"
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
		// The hook sidecars' sockets (KubeVirt's pkg/hooks).
		hooksinfo.Info_Info_FullMethodName:                     "/kubevirt.hooks.info.Info/Info",
		hooksv1alpha1.Callbacks_OnDefineDomain_FullMethodName:  "/kubevirt.hooks.v1alpha1.Callbacks/OnDefineDomain",
		hooksv1alpha2.Callbacks_OnDefineDomain_FullMethodName:  "/kubevirt.hooks.v1alpha2.Callbacks/OnDefineDomain",
		hooksv1alpha2.Callbacks_PreCloudInitIso_FullMethodName: "/kubevirt.hooks.v1alpha2.Callbacks/PreCloudInitIso",
		hooksv1alpha3.Callbacks_OnDefineDomain_FullMethodName:  "/kubevirt.hooks.v1alpha3.Callbacks/OnDefineDomain",
		hooksv1alpha3.Callbacks_PreCloudInitIso_FullMethodName: "/kubevirt.hooks.v1alpha3.Callbacks/PreCloudInitIso",
		hooksv1alpha3.Callbacks_Shutdown_FullMethodName:        "/kubevirt.hooks.v1alpha3.Callbacks/Shutdown",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("method path %q, want %q", got, want)
		}
	}
	if n := len(cmdv1.Cmd_ServiceDesc.Methods); n != 36 {
		t.Errorf("Cmd has %d RPCs, want 36", n)
	}
	for _, c := range []struct {
		name    string
		n, want int
	}{
		{"v1alpha1", len(hooksv1alpha1.Callbacks_ServiceDesc.Methods), 1},
		{"v1alpha2", len(hooksv1alpha2.Callbacks_ServiceDesc.Methods), 2},
		{"v1alpha3", len(hooksv1alpha3.Callbacks_ServiceDesc.Methods), 3},
	} {
		if c.n != c.want {
			t.Errorf("hooks %s Callbacks has %d RPCs, want %d", c.name, c.n, c.want)
		}
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
		// Hook sidecars: field numbers of KubeVirt's pkg/hooks .proto files
		// (InfoResult skips 2; the cloud-init messages skip 2 in the result).
		{"hooks InfoResult", &hooksinfo.InfoResult{Name: "s", HookPoints: []*hooksinfo.HookPoint{{Name: "X", Priority: 1}}, Versions: []string{"v"}},
			[]byte{0x0a, 0x01, 's', 0x1a, 0x05, 0x0a, 0x01, 'X', 0x10, 0x01, 0x22, 0x01, 'v'}},
		{"hooks HookPoint negative priority", &hooksinfo.HookPoint{Priority: -1},
			[]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"hooks v1alpha1 OnDefineDomainParams", &hooksv1alpha1.OnDefineDomainParams{DomainXML: []byte("d"), Vmi: []byte("v")},
			[]byte{0x0a, 0x01, 'd', 0x12, 0x01, 'v'}},
		{"hooks v1alpha2 OnDefineDomainResult", &hooksv1alpha2.OnDefineDomainResult{DomainXML: []byte("d")},
			[]byte{0x0a, 0x01, 'd'}},
		{"hooks v1alpha2 PreCloudInitIsoParams", &hooksv1alpha2.PreCloudInitIsoParams{CloudInitNoCloudSource: []byte("n"), Vmi: []byte("v"), CloudInitData: []byte("c")},
			[]byte{0x0a, 0x01, 'n', 0x12, 0x01, 'v', 0x1a, 0x01, 'c'}},
		{"hooks v1alpha3 PreCloudInitIsoResult", &hooksv1alpha3.PreCloudInitIsoResult{CloudInitNoCloudSource: []byte("n"), CloudInitData: []byte("c")},
			[]byte{0x0a, 0x01, 'n', 0x1a, 0x01, 'c'}},
		{"hooks v1alpha3 OnDefineDomainParams", &hooksv1alpha3.OnDefineDomainParams{DomainXML: []byte("d"), Vmi: []byte("v")},
			[]byte{0x0a, 0x01, 'd', 0x12, 0x01, 'v'}},
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
