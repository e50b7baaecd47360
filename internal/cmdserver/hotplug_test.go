package cmdserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

func vmiRequest(t *testing.T, v *v1.VirtualMachineInstance) *cmdv1.VMIRequest {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: b}}
}

// SignalTargetPodCleanup succeeds; when this pod is the VMI's migration
// target it abandons the target (the launcher exits early).
func TestSignalTargetPodCleanup(t *testing.T) {
	target := func(pod string) *v1.VirtualMachineInstance {
		v := testVMI()
		v.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{TargetPod: pod, SourcePod: "virt-launcher-vm1-src"}
		return v
	}
	tests := []struct {
		name, pod string
		vmi       *v1.VirtualMachineInstance
		abandon   bool
	}{
		{"no migration", "virt-launcher-vm1-abc", testVMI(), false},
		{"another pod is the target", "virt-launcher-vm1-src", target("virt-launcher-vm1-dst"), false},
		{"pod name unknown", "", target("virt-launcher-vm1-dst"), false},
		{"this pod is the target", "virt-launcher-vm1-dst", target("virt-launcher-vm1-dst"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &cmdservertest.Fake{}
			c, _ := startWith(t, m, cmdserver.WithPodName(tt.pod))
			resp, err := cmdv1.NewCmdClient(c.Conn()).SignalTargetPodCleanup(context.Background(), vmiRequest(t, tt.vmi))
			if err != nil || !resp.Success {
				t.Fatalf("%+v, %v; want success", resp, err)
			}
			abandoned := len(m.Ops) > 0 && m.Last().Op == "AbandonTarget"
			if abandoned != tt.abandon {
				t.Errorf("target abandoned: %v, want %v (calls %+v)", abandoned, tt.abandon, m.Ops)
			}
		})
	}
}

// The VMI-scoped RPCs answered by one Manager call (or none): the
// Manager's verdict is the answer, and a VMI that does not decode fails
// before the Manager is asked.
func TestNothingToDoRPCs(t *testing.T) {
	type rpc func(context.Context, cmdv1.CmdClient, *cmdv1.VMIRequest) (*cmdv1.Response, error)
	rpcs := map[string]struct {
		call rpc
		op   string // the Manager call, "" when none
	}{
		"SyncVirtualMachineCPUs": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return c.SyncVirtualMachineCPUs(ctx, r)
		}, "SyncVCPUs"},
		"SyncVirtualMachineMemory": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return c.SyncVirtualMachineMemory(ctx, r)
		}, "SyncMemory"},
		"HotplugHostDevices": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return c.HotplugHostDevices(ctx, r)
		}, "HotplugHostDevices"},
		"CancelVirtualMachineMigration": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return c.CancelVirtualMachineMigration(ctx, r)
		}, "CancelMigration"},
		"SyncMigrationTarget": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return c.SyncMigrationTarget(ctx, r)
		}, "PrepareMigrationTarget"},
		"FinalizeVirtualMachineMigration": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return c.FinalizeVirtualMachineMigration(ctx, r)
		}, "FinalizeMigration"},
		"GetScreenshot": {func(ctx context.Context, c cmdv1.CmdClient, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			resp, err := c.GetScreenshot(ctx, r)
			return resp.GetResponse(), err
		}, "Screenshot"},
	}
	for name, r := range rpcs {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m := &cmdservertest.Fake{}
			c, _ := start(t, m)
			cc := cmdv1.NewCmdClient(c.Conn())
			resp, err := r.call(ctx, cc, vmiRequest(t, testVMI()))
			if err != nil || !resp.GetSuccess() {
				t.Fatalf("nothing to do: %+v, %v", resp, err)
			}
			if r.op != "" && m.Last().Op != r.op {
				t.Errorf("manager call %+v, want %s", m.Last(), r.op)
			}
			m.Err = errors.New("the VMI asks for 4 vCPUs")
			resp, err = r.call(ctx, cc, vmiRequest(t, testVMI()))
			switch {
			case err != nil:
				t.Fatal(err)
			case r.op == "" && !resp.GetSuccess():
				t.Errorf("no manager call, yet failed: %q", resp.GetMessage())
			case r.op != "" && (resp.GetSuccess() || resp.GetMessage() != "the VMI asks for 4 vCPUs"):
				t.Errorf("manager failure answered %+v", resp)
			}
			before := len(m.Ops)
			resp, err = r.call(ctx, cc, &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: []byte("{bad")}})
			if err != nil || resp.GetSuccess() || !strings.HasPrefix(resp.GetMessage(), cmdserver.InvalidVMIMessage) {
				t.Errorf("bad VMI: %+v, %v", resp, err)
			}
			if len(m.Ops) != before {
				t.Errorf("bad VMI reached the manager")
			}
		})
	}
}

func TestGetScreenshotData(t *testing.T) {
	c, _ := start(t, &cmdservertest.Fake{})
	resp, err := cmdv1.NewCmdClient(c.Conn()).GetScreenshot(context.Background(), vmiRequest(t, testVMI()))
	if err != nil || !resp.GetResponse().GetSuccess() {
		t.Fatalf("%+v %v", resp, err)
	}
	if resp.Mime != "image/x-portable-pixmap" || !strings.HasPrefix(string(resp.Data), "P6\n1 1\n") {
		t.Errorf("mime %q data %q", resp.Mime, resp.Data)
	}
}
