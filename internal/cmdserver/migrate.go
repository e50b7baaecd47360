package cmdserver

import (
	"context"
	"sort"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

// Live migration's RPCs (docs/migration.md §1). Each answers once the
// manager has done its part: MigrateVirtualMachine once the migration
// runs (its progress and result go into the Domain's metadata),
// SyncMigrationTarget once the pod is ready for the incoming domain.

func (c *cmdServer) MigrateVirtualMachine(ctx context.Context, req *cmdv1.MigrationRequest) (*cmdv1.Response, error) {
	o, err := migration.ParseOptions(req.GetOptions())
	if err != nil {
		return fail(err.Error()), nil
	}
	return c.vmiOp(ctx, "MigrateVirtualMachine", &cmdv1.VMIRequest{Vmi: req.GetVmi()}, func(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
		return c.s.m.Migrate(ctx, vmi, o)
	})
}

func (c *cmdServer) SyncMigrationTarget(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.syncOp(ctx, "SyncMigrationTarget", req, c.s.m.PrepareMigrationTarget)
}

// FinalizeVirtualMachineMigration: the options carry, per interface, the
// migration method its binding plugin asks for; "link-refresh" (the
// plugin's migration.method linkRefresh, KubeVirt v1.9's v1.LinkRefresh)
// is the one KubeVirt acts on.
func (c *cmdServer) FinalizeVirtualMachineMigration(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	var refresh []string
	for iface, m := range req.GetOptions().GetInterfaceMigration() {
		if m.GetMethod() == "link-refresh" {
			refresh = append(refresh, iface)
		}
	}
	sort.Strings(refresh)
	return c.vmiOp(ctx, "FinalizeVirtualMachineMigration", req, func(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
		return c.s.m.FinalizeMigration(ctx, vmi, refresh)
	})
}

// CancelVirtualMachineMigration aborts the migration under way; with none
// it succeeds, as KubeVirt v1.9's launcher does.
func (c *cmdServer) CancelVirtualMachineMigration(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "CancelVirtualMachineMigration", req, func(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
		return c.s.m.CancelMigration(ctx, vmi)
	})
}
