// Package cmdservertest runs the real command server on a temporary
// socket with a fake Manager, for tests of command-socket clients (vlctl,
// virt-probe, virt-freezer) that do not need a real domain.
package cmdservertest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

// Fake is a Manager that records the operations it is asked for and
// answers with Err, Dom, Stats and Version. It drives no domain.
type Fake struct {
	mu      sync.Mutex
	Ops     []string // "Sync vm1", "Pause vm1", ...
	Err     error
	Dom     *domainjson.Domain
	Stats   []byte
	Version string
	// DirtyRateStats is DirtyRate's answer.
	DirtyRateStats domain.StatsDirtyRate
	// Agent makes Exec and GuestPing answer as a guest agent would: Exec
	// returns ExecOut and exits with ExecCode. Without it both fail.
	Agent    bool
	ExecOut  string
	ExecCode int
}

func (f *Fake) op(name string, vmi *v1.VirtualMachineInstance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Ops = append(f.Ops, name+" "+vmi.Name)
	return f.Err
}

// Calls returns the recorded operations.
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.Ops...)
}

func (f *Fake) Sync(_ context.Context, vmi *v1.VirtualMachineInstance, _ domain.SyncOptions) error {
	return f.op("Sync", vmi)
}
func (f *Fake) Pause(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Pause", vmi)
}
func (f *Fake) Unpause(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Unpause", vmi)
}
func (f *Fake) Shutdown(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Shutdown", vmi)
}
func (f *Fake) Kill(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Kill", vmi)
}
func (f *Fake) Delete(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Delete", vmi)
}
func (f *Fake) Reset(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Reset", vmi)
}
func (f *Fake) SoftReboot(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("SoftReboot", vmi)
}

// Domain returns Dom (nil: no domain).
func (f *Fake) Domain(context.Context) (*domainjson.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Dom, f.Err
}

// DomainStats returns Stats.
func (f *Fake) DomainStats(context.Context) ([]byte, error) { return f.Stats, f.Err }

// DirtyRate returns DirtyRateStats.
func (f *Fake) DirtyRate(context.Context) (domain.StatsDirtyRate, error) {
	return f.DirtyRateStats, f.Err
}

// AgentData fails: the fake has no guest agent data.
func (f *Fake) AgentData(_ context.Context, command string) (string, error) {
	return "", errors.New("no agent data for " + command)
}

// QemuVersion returns Version.
func (f *Fake) QemuVersion(context.Context) (string, error) { return f.Version, f.Err }

// SyncMemory records the call and returns Err.
func (f *Fake) SyncMemory(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("SyncMemory", vmi)
}

// SyncVCPUs records the call and returns Err.
func (f *Fake) SyncVCPUs(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("SyncVCPUs", vmi)
}

// HotplugHostDevices records the call and returns Err.
func (f *Fake) HotplugHostDevices(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("HotplugHostDevices", vmi)
}

// Exec answers ExecOut and ExecCode with Agent, else fails.
func (f *Fake) Exec(context.Context, string, string, []string, time.Duration) (string, error) {
	switch {
	case !f.Agent:
		return "", errNoAgent
	case f.ExecCode != 0:
		return f.ExecOut, agent.ExitError{Code: f.ExecCode}
	}
	return f.ExecOut, nil
}

// Freeze records the call and returns Err.
func (f *Fake) Freeze(_ context.Context, vmi *v1.VirtualMachineInstance, _ time.Duration) error {
	return f.op("Freeze", vmi)
}

// Unfreeze records the call and returns Err.
func (f *Fake) Unfreeze(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("Unfreeze", vmi)
}

// GuestPing succeeds with Agent, else fails.
func (f *Fake) GuestPing(context.Context, string) error {
	if !f.Agent {
		return errNoAgent
	}
	return nil
}

var errNoAgent = errors.New("no guest agent in the fake manager")

// Screenshot records the call and returns an empty PPM image, or Err.
func (f *Fake) Screenshot(_ context.Context, vmi *v1.VirtualMachineInstance) (string, []byte, error) {
	if err := f.op("Screenshot", vmi); err != nil {
		return "", nil, err
	}
	return "image/x-portable-pixmap", []byte("P6\n0 0\n255\n"), nil
}

// Start serves m on a socket in a temporary directory until the test ends
// and returns the socket path.
func Start(t testing.TB, m cmdserver.Manager) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "launcher-sock")
	lis, err := cmdserver.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cmdserver.New(m, slog.New(slog.NewTextHandler(io.Discard, nil)), cmdserver.WithoutSyncValidation()).Serve(ctx, lis)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("command server: %v", err)
		}
	})
	return sock
}

// MemoryDump records the call.
func (f *Fake) MemoryDump(_ context.Context, vmi *v1.VirtualMachineInstance, _ string) error {
	return f.op("MemoryDump", vmi)
}

// Backup records the call.
func (f *Fake) Backup(_ context.Context, vmi *v1.VirtualMachineInstance, _ *backupv1.BackupOptions) error {
	return f.op("Backup", vmi)
}

// RedefineCheckpoint records the call.
func (f *Fake) RedefineCheckpoint(_ context.Context, vmi *v1.VirtualMachineInstance, _ *backupv1.BackupCheckpoint) (bool, error) {
	return false, f.op("RedefineCheckpoint", vmi)
}

func (f *Fake) Migrate(_ context.Context, vmi *v1.VirtualMachineInstance, _ migration.Options) error {
	return f.op("Migrate", vmi)
}
func (f *Fake) CancelMigration(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("CancelMigration", vmi)
}
func (f *Fake) PrepareMigrationTarget(_ context.Context, vmi *v1.VirtualMachineInstance, _ domain.SyncOptions) error {
	return f.op("PrepareMigrationTarget", vmi)
}
func (f *Fake) FinalizeMigration(_ context.Context, vmi *v1.VirtualMachineInstance, _ []string) error {
	return f.op("FinalizeMigration", vmi)
}
func (f *Fake) AbandonTarget() { f.op("AbandonTarget", &v1.VirtualMachineInstance{}) }
