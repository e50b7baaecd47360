package cmdserver

import (
	"context"
	"time"

	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

// Manager is the domain manager the command server drives. The server
// serialises mutating calls itself only through the manager: the manager is
// responsible for one-operation-at-a-time, and Domain must never wait behind
// a long Sync.
type Manager interface {
	Sync(ctx context.Context, vmi *v1.VirtualMachineInstance, opts domain.SyncOptions) error
	Pause(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	Unpause(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	Shutdown(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	Kill(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	Delete(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	Reset(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	SoftReboot(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	// Domain returns the current Domain JSON object, or nil when no domain
	// is defined.
	Domain(ctx context.Context) (*domainjson.Domain, error)
	// DomainStats returns the stats JSON (KubeVirt's DomainStats keys).
	DomainStats(ctx context.Context) ([]byte, error)
	// DirtyRate measures the guest's memory dirty rate (or answers a
	// measurement of the last few seconds).
	DirtyRate(ctx context.Context) (domain.StatsDirtyRate, error)
	// AgentData is the guest agent's raw reply to one of GetVMStats'
	// agent commands (or a recent one).
	AgentData(ctx context.Context, command string) (string, error)
	QemuVersion(ctx context.Context) (string, error)
	// SyncVCPUs sets the domain's vCPU count to the VMI's; HotplugHostDevices
	// answers nil when the domain already is what the VMI asks for. Both
	// fail naming the change they cannot make.
	SyncVCPUs(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	// SyncMemory sets the hotplugged memory to the VMI's guest memory.
	SyncMemory(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	HotplugHostDevices(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	// Exec runs command in the guest through its agent and returns its
	// standard output; a non-zero exit is an agent.ExitError.
	Exec(ctx context.Context, domainName, command string, args []string, timeout time.Duration) (string, error)
	// Freeze freezes the guest's file systems, thawing them by itself
	// after unfreezeTimeout (zero: never) unless Unfreeze comes first.
	Freeze(ctx context.Context, vmi *v1.VirtualMachineInstance, unfreezeTimeout time.Duration) error
	Unfreeze(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	// GuestPing pings the guest agent.
	GuestPing(ctx context.Context, domainName string) error
	// Screenshot returns the primary display's image and its MIME type.
	Screenshot(ctx context.Context, vmi *v1.VirtualMachineInstance) (mime string, data []byte, err error)
	// Migrate starts the live migration to the target behind the
	// migration proxy and returns once it runs; CancelMigration aborts it.
	Migrate(ctx context.Context, vmi *v1.VirtualMachineInstance, o migration.Options) error
	CancelMigration(ctx context.Context, vmi *v1.VirtualMachineInstance) error
	// PrepareMigrationTarget readies this pod for the incoming domain;
	// FinalizeMigration ends the target's part (linkRefresh: interfaces
	// whose binding asks for a link refresh).
	PrepareMigrationTarget(ctx context.Context, vmi *v1.VirtualMachineInstance, opts domain.SyncOptions) error
	FinalizeMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, linkRefresh []string) error
	// MemoryDump starts a memory dump of the domain to dumpPath and
	// returns once it runs; its end is in the Domain's metadata.
	MemoryDump(ctx context.Context, vmi *v1.VirtualMachineInstance, dumpPath string) error
	// Backup runs a backup command (start or abort); a started backup's
	// end is in the Domain's metadata.
	Backup(ctx context.Context, vmi *v1.VirtualMachineInstance, o *backupv1.BackupOptions) error
	// RedefineCheckpoint defines a checkpoint again from the bitmaps the
	// disks hold; invalid: they do not hold it (a full backup is due).
	RedefineCheckpoint(ctx context.Context, vmi *v1.VirtualMachineInstance, cp *backupv1.BackupCheckpoint) (invalid bool, err error)
	// AbandonTarget tells a migration target whose domain has not
	// arrived to stop waiting for it (SignalTargetPodCleanup).
	AbandonTarget()
}

// The launcher drives a *domain.Manager; this catches a signature that
// drifts before the launcher does.
var _ Manager = (*domain.Manager)(nil)
