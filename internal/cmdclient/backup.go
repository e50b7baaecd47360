package cmdclient

import (
	"context"
	"encoding/json"
	"fmt"

	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// Backup sends BackupVirtualMachine as virt-handler does (the options as
// JSON, its long deadline). A started backup's end is in the Domain's
// Spec.Metadata.KubeVirt.Backup.
func (c *Client) Backup(ctx context.Context, vmi *v1.VirtualMachineInstance, o *backupv1.BackupOptions) error {
	const rpc = "BackupVirtualMachine"
	raw, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	return c.BackupRaw(ctx, vmi, raw)
}

// BackupRaw is Backup with the options JSON as given (for tests of bad
// requests).
func (c *Client) BackupRaw(ctx context.Context, vmi *v1.VirtualMachineInstance, options []byte) error {
	const rpc = "BackupVirtualMachine"
	m, err := vmiMessage(vmi)
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	ctx, cancel := context.WithTimeout(ctx, LongTimeout)
	defer cancel()
	resp, err := c.cmd.BackupVirtualMachine(ctx, &cmdv1.BackupRequest{Vmi: m, Options: options})
	if err := callError(rpc, err); err != nil {
		return err
	}
	return responseError(rpc, resp)
}

// RedefineCheckpoint sends RedefineCheckpoint as virt-handler does;
// invalid is the launcher's checkpointInvalid (the bitmaps are gone: the
// next backup must be full), set only with an error.
func (c *Client) RedefineCheckpoint(ctx context.Context, vmi *v1.VirtualMachineInstance, cp *backupv1.BackupCheckpoint) (invalid bool, err error) {
	const rpc = "RedefineCheckpoint"
	m, err := vmiMessage(vmi)
	if err != nil {
		return false, fmt.Errorf("%s: %w", rpc, err)
	}
	raw, err := json.Marshal(cp)
	if err != nil {
		return false, fmt.Errorf("%s: %w", rpc, err)
	}
	ctx, cancel := context.WithTimeout(ctx, LongTimeout)
	defer cancel()
	resp, err := c.cmd.RedefineCheckpoint(ctx, &cmdv1.RedefineCheckpointRequest{Vmi: m, Checkpoint: raw})
	if err := callError(rpc, err); err != nil {
		return false, err
	}
	if err := responseError(rpc, resp.GetResponse()); err != nil {
		return resp.GetCheckpointInvalid(), err
	}
	return false, nil
}
