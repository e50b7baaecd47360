package cmdserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

// BackupVirtualMachine decodes virt-handler's options JSON and hands it
// to the Manager; options that are missing or do not decode are refused
// naming options, before the Manager is asked; the Manager's refusal is
// answered with its message.
func TestBackupRPC(t *testing.T) {
	ctx := context.Background()
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	cc := cmdv1.NewCmdClient(c.Conn())
	opts := `{"backupName":"b1","cmd":"Start","mode":"Push","backupStartTime":"2026-12-07T10:00:00Z","targetPath":"/var/run/kubevirt/hotplug-disks/t","incremental":"b0-2026-12-06_10-00-00"}`
	resp, err := cc.BackupVirtualMachine(ctx, &cmdv1.BackupRequest{Vmi: vmiRequest(t, testVMI()).Vmi, Options: []byte(opts)})
	if err != nil || !resp.GetSuccess() {
		t.Fatalf("backup: %+v, %v; want success", resp, err)
	}
	o := m.BackupOpts
	if got := m.Last(); got.Op != "Backup" || o == nil || o.BackupName != "b1" || string(o.Cmd) != "Start" || string(o.Mode) != "Push" ||
		o.TargetPath == nil || *o.TargetPath != "/var/run/kubevirt/hotplug-disks/t" || o.Incremental == nil || *o.Incremental != "b0-2026-12-06_10-00-00" ||
		o.BackupStartTime == nil || o.BackupStartTime.UTC().Hour() != 10 {
		t.Errorf("manager call %+v with options %+v", got, o)
	}

	n := len(m.Ops)
	for _, bad := range []string{"", `{"cmd":`, "null"} {
		resp, err := cc.BackupVirtualMachine(ctx, &cmdv1.BackupRequest{Vmi: vmiRequest(t, testVMI()).Vmi, Options: []byte(bad)})
		if err != nil || resp.GetSuccess() || !strings.HasPrefix(resp.GetMessage(), "options: ") {
			t.Errorf("options %q: %+v, %v; want refused naming options", bad, resp, err)
		}
	}
	if len(m.Ops) != n {
		t.Errorf("bad options reached the manager: %+v", m.Ops[n:])
	}

	m.Err = errors.New("mode \"Sideways\": must be Push or Pull")
	resp, err = cc.BackupVirtualMachine(ctx, &cmdv1.BackupRequest{Vmi: vmiRequest(t, testVMI()).Vmi, Options: []byte(opts)})
	if err != nil || resp.GetSuccess() || !strings.HasPrefix(resp.GetMessage(), "mode ") {
		t.Errorf("refused by the manager: %+v, %v; want its message", resp, err)
	}
}

// RedefineCheckpoint decodes the checkpoint JSON and answers the
// Manager's verdict, checkpointInvalid only with a failure.
func TestRedefineCheckpointRPC(t *testing.T) {
	ctx := context.Background()
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	cc := cmdv1.NewCmdClient(c.Conn())
	cp := []byte(`{"name":"b1-2026-12-07_10-00-00","creationTime":"2026-12-07T10:00:00Z","volumes":[{"volumeName":"data","diskTarget":"vdb"}]}`)
	resp, err := cc.RedefineCheckpoint(ctx, &cmdv1.RedefineCheckpointRequest{Vmi: vmiRequest(t, testVMI()).Vmi, Checkpoint: cp})
	if err != nil || !resp.GetResponse().GetSuccess() || resp.GetCheckpointInvalid() {
		t.Fatalf("redefine: %+v, %v; want success", resp, err)
	}
	if got := m.Last(); got.Op != "RedefineCheckpoint" || m.Checkpoint == nil || m.Checkpoint.Name != "b1-2026-12-07_10-00-00" ||
		m.Checkpoint.CreationTime == nil || len(m.Checkpoint.Volumes) != 1 || m.Checkpoint.Volumes[0].DiskTarget != "vdb" {
		t.Errorf("manager call %+v with checkpoint %+v", got, m.Checkpoint)
	}

	m.Err, m.Invalid = errors.New("no disks found with checkpoint bitmap b1-2026-12-07_10-00-00"), true
	resp, err = cc.RedefineCheckpoint(ctx, &cmdv1.RedefineCheckpointRequest{Vmi: vmiRequest(t, testVMI()).Vmi, Checkpoint: cp})
	if err != nil || resp.GetResponse().GetSuccess() || !resp.GetCheckpointInvalid() || !strings.Contains(resp.GetResponse().GetMessage(), "bitmap") {
		t.Errorf("bitmap gone: %+v, %v; want a failure with checkpointInvalid", resp, err)
	}

	m.Err, m.Invalid = nil, false
	n := len(m.Ops)
	resp, err = cc.RedefineCheckpoint(ctx, &cmdv1.RedefineCheckpointRequest{Vmi: vmiRequest(t, testVMI()).Vmi, Checkpoint: []byte(`{"name":`)})
	if err != nil || resp.GetResponse().GetSuccess() || resp.GetCheckpointInvalid() || !strings.Contains(resp.GetResponse().GetMessage(), "checkpoint: ") {
		t.Errorf("undecodable checkpoint: %+v, %v; want refused naming checkpoint", resp, err)
	}
	if len(m.Ops) != n {
		t.Errorf("an undecodable checkpoint reached the manager: %+v", m.Ops[n:])
	}
}
