package cmdserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

// VirtualMachineMemoryDump hands the VMI and virt-handler's dumpPath to the
// Manager and answers its verdict: success once the dump runs, a failure
// with the Manager's message otherwise; a VMI that does not decode fails
// before the Manager is asked.
func TestMemoryDumpRPC(t *testing.T) {
	const path = "/var/run/kubevirt/hotplug-disks/dumpvol/vm1-dumpvol-20260101-000000.memory.dump"
	ctx := context.Background()
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	cc := cmdv1.NewCmdClient(c.Conn())
	req := &cmdv1.MemoryDumpRequest{Vmi: vmiRequest(t, testVMI()).Vmi, DumpPath: path}
	if resp, err := cc.VirtualMachineMemoryDump(ctx, req); err != nil || !resp.GetSuccess() {
		t.Fatalf("memory dump: %+v, %v; want success", resp, err)
	}
	if got := m.Last(); got.Op != "MemoryDump" || got.Name != testVMI().Name || m.DumpPath != path {
		t.Errorf("manager call %+v with path %q, want MemoryDump of %s to %s", got, m.DumpPath, testVMI().Name, path)
	}

	m.Err = errors.New(`dumpPath "x": must be an absolute path`)
	req = &cmdv1.MemoryDumpRequest{Vmi: vmiRequest(t, testVMI()).Vmi, DumpPath: "x"}
	if resp, err := cc.VirtualMachineMemoryDump(ctx, req); err != nil || resp.GetSuccess() || !strings.Contains(resp.GetMessage(), "dumpPath") {
		t.Errorf("refused by the manager: %+v, %v; want its message", resp, err)
	}

	m.Err = nil
	n := len(m.Ops)
	resp, err := cc.VirtualMachineMemoryDump(ctx, &cmdv1.MemoryDumpRequest{Vmi: &cmdv1.VMI{VmiJson: []byte(`{"metadata":`)}, DumpPath: path})
	if err != nil || resp.GetSuccess() || resp.GetMessage() == "" {
		t.Errorf("undecodable VMI: %+v, %v; want a failure with a message", resp, err)
	}
	if len(m.Ops) != n {
		t.Errorf("an undecodable VMI reached the manager: %+v", m.Ops[n:])
	}
}
