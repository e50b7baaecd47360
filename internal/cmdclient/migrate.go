package cmdclient

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

// The live migration calls, as virt-handler makes them (20 s each).

// Migrate sends MigrateVirtualMachine with options as KubeVirt's handler
// encodes them; it answers once the migration runs.
func (c *Client) Migrate(ctx context.Context, vmi *v1.VirtualMachineInstance, o migration.Options) error {
	const rpc = "MigrateVirtualMachine"
	m, err := vmiMessage(vmi)
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	opts, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("%s: encode options: %w", rpc, err)
	}
	ctx, cancel := context.WithTimeout(ctx, LongTimeout)
	defer cancel()
	resp, err := c.cmd.MigrateVirtualMachine(ctx, &cmdv1.MigrationRequest{Vmi: m, Options: opts})
	if err := callError(rpc, err); err != nil {
		return err
	}
	return responseError(rpc, resp)
}

// SyncMigrationTarget sends SyncMigrationTarget to the target pod's
// launcher.
func (c *Client) SyncMigrationTarget(ctx context.Context, vmi *v1.VirtualMachineInstance, opts *cmdv1.VirtualMachineOptions) error {
	return c.vmiRequest(ctx, "SyncMigrationTarget", c.cmd.SyncMigrationTarget, vmi, opts, false)
}

// FinalizeMigration sends FinalizeVirtualMachineMigration to the target;
// opts carries the interfaces' migration methods (InterfaceMigration), as
// virt-handler sends them, or is nil.
func (c *Client) FinalizeMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, opts *cmdv1.VirtualMachineOptions) error {
	return c.vmiRequest(ctx, "FinalizeVirtualMachineMigration", c.cmd.FinalizeVirtualMachineMigration, vmi, opts, false)
}

// CancelMigration sends CancelVirtualMachineMigration to the source.
func (c *Client) CancelMigration(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "CancelVirtualMachineMigration", c.cmd.CancelVirtualMachineMigration, vmi, nil, false)
}

// SignalTargetPodCleanup sends SignalTargetPodCleanup.
func (c *Client) SignalTargetPodCleanup(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "SignalTargetPodCleanup", c.cmd.SignalTargetPodCleanup, vmi, nil, false)
}
