package cmdserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// BackupVirtualMachine runs a backup command as KubeVirt v1.9's launcher
// does: Start begins a full or incremental backup of the disks on
// changed block tracking overlays and answers once libvirt's job runs
// (its end is in the Domain's backup metadata); Abort ends the running
// one. The options come as JSON (backup/v1alpha1 BackupOptions); a
// request without them, or with fields that do not fit, is refused
// naming the field.
func (c *cmdServer) BackupVirtualMachine(ctx context.Context, req *cmdv1.BackupRequest) (*cmdv1.Response, error) {
	raw := req.GetOptions()
	return c.vmiOp(ctx, "BackupVirtualMachine", &cmdv1.VMIRequest{Vmi: req.GetVmi()}, func(ctx context.Context, v *v1.VirtualMachineInstance) error {
		o, err := backupOptions(raw)
		if err != nil {
			return err
		}
		return c.s.m.Backup(ctx, v, o)
	})
}

func backupOptions(raw []byte) (*backupv1.BackupOptions, error) {
	if len(raw) == 0 {
		return nil, errors.New("options: backup options object not present in command server request")
	}
	var o *backupv1.BackupOptions
	if err := json.Unmarshal(raw, &o); err != nil || o == nil {
		return nil, fmt.Errorf("options: no valid backup options object present in command server request: %v", err)
	}
	return o, nil
}

// RedefineCheckpoint defines again, in a new libvirt daemon, a checkpoint
// whose bitmaps the disks' overlays still hold (after a restart of the
// VM or a migration), so that the next incremental backup can start from
// it. checkpointInvalid tells virt-handler that the bitmaps are gone or
// unusable: the next backup must be a full one.
func (c *cmdServer) RedefineCheckpoint(ctx context.Context, req *cmdv1.RedefineCheckpointRequest) (*cmdv1.RedefineCheckpointResponse, error) {
	raw := req.GetCheckpoint()
	invalid := false
	resp, err := c.vmiOp(ctx, "RedefineCheckpoint", &cmdv1.VMIRequest{Vmi: req.GetVmi()}, func(ctx context.Context, v *v1.VirtualMachineInstance) error {
		var cp backupv1.BackupCheckpoint
		if err := json.Unmarshal(raw, &cp); err != nil {
			return fmt.Errorf("redefine checkpoint failed: invalid checkpoint info: checkpoint: %v", err)
		}
		var err error
		invalid, err = c.s.m.RedefineCheckpoint(ctx, v, &cp)
		return err
	})
	return &cmdv1.RedefineCheckpointResponse{Response: resp, CheckpointInvalid: invalid && !resp.GetSuccess()}, err
}
