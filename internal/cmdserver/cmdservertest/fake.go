// Package cmdservertest runs the real command server on a temporary
// socket with a fake Manager, for the server's own wire tests and for tests
// of command-socket clients (virt-probe, virt-freezer) that do not need a
// real domain.
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
// answers with Err and the canned answers below. It drives no domain.
// Tests may set its fields directly between calls.
type Fake struct {
	mu  sync.Mutex
	Ops []Call // in the order they arrived
	Err error
	// PanicOn makes the operation of that name panic after recording it.
	PanicOn string
	// SyncGate, when set, makes Sync send on SyncIn and then block until
	// SyncGate is closed or its context ends.
	SyncGate chan struct{}
	SyncIn   chan struct{}
	Dom      *domainjson.Domain
	Stats    []byte
	Version  string
	// DirtyRateStats is DirtyRate's answer.
	DirtyRateStats domain.StatsDirtyRate
	// FakeAgent answers the guest agent's operations.
	FakeAgent
	// DumpPath is MemoryDump's path, BackupOpts Backup's options,
	// Checkpoint RedefineCheckpoint's checkpoint; Invalid is the verdict
	// RedefineCheckpoint answers.
	DumpPath   string
	BackupOpts *backupv1.BackupOptions
	Checkpoint *backupv1.BackupCheckpoint
	Invalid    bool
}

// FakeAgent is the Fake's guest agent: the answers of AgentData, Exec and
// GuestPing, and what the last of them was given.
type FakeAgent struct {
	// AgentAnswers answers AgentData by guest agent command; other commands
	// fail.
	AgentAnswers map[string]string
	// Agent makes Exec and GuestPing answer as a guest agent would: Exec
	// returns ExecOut and exits with ExecCode. Without it both fail.
	// ExecErr and PingErr, when set, are their errors instead.
	Agent    bool
	ExecOut  string
	ExecCode int
	ExecErr  error
	PingErr  error
	// ExecArgs is what the last Exec (domain, command, timeout, args) or
	// GuestPing (domain) was given.
	ExecArgs []string
}

// Call is one operation the Fake was asked for.
type Call struct {
	Op   string
	Name string             // the VMI's name
	Opts domain.SyncOptions // Sync's and PrepareMigrationTarget's options
}

func (f *Fake) record(name string, vmi *v1.VirtualMachineInstance, opts domain.SyncOptions) error {
	f.mu.Lock()
	f.Ops = append(f.Ops, Call{name, vmi.Name, opts})
	err := f.Err
	f.mu.Unlock()
	if f.PanicOn == name {
		panic("boom in " + name)
	}
	return err
}

func (f *Fake) op(name string, vmi *v1.VirtualMachineInstance) error {
	return f.record(name, vmi, domain.SyncOptions{})
}

// Calls returns the recorded operations as "Op name".
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.Ops))
	for _, c := range f.Ops {
		out = append(out, c.Op+" "+c.Name)
	}
	return out
}

// Last returns the last recorded operation (zero when none).
func (f *Fake) Last() Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.Ops) == 0 {
		return Call{}
	}
	return f.Ops[len(f.Ops)-1]
}

// Sync records the call with its options, after SyncGate when set.
func (f *Fake) Sync(ctx context.Context, vmi *v1.VirtualMachineInstance, o domain.SyncOptions) error {
	if f.SyncGate != nil {
		f.SyncIn <- struct{}{}
		select {
		case <-f.SyncGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.record("Sync", vmi, o)
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
func (f *Fake) DomainStats(context.Context) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Stats, f.Err
}

// DirtyRate returns DirtyRateStats.
func (f *Fake) DirtyRate(context.Context) (domain.StatsDirtyRate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.DirtyRateStats, f.Err
}

// AgentData answers from AgentAnswers, failing as the guest agent does for
// a command it lacks.
func (f *Fake) AgentData(_ context.Context, command string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.AgentAnswers[command]; ok {
		return d, nil
	}
	return "", errors.New("The command " + command + " has not been found")
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

// Exec records its arguments in ExecArgs and answers ExecErr when set,
// else ExecOut and ExecCode with Agent, else fails.
func (f *Fake) Exec(_ context.Context, domainName, command string, args []string, timeout time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ExecArgs = append([]string{domainName, command, timeout.String()}, args...)
	switch {
	case f.ExecErr != nil:
		return f.ExecOut, f.ExecErr
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

// GuestPing records the domain in ExecArgs and answers PingErr when set,
// else succeeds with Agent, else fails.
func (f *Fake) GuestPing(_ context.Context, domainName string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ExecArgs = []string{domainName}
	switch {
	case f.PingErr != nil:
		return f.PingErr
	case !f.Agent:
		return errNoAgent
	}
	return nil
}

var errNoAgent = errors.New("no guest agent in the fake manager")

// Screenshot records the call and returns a one-pixel PPM image, or Err.
func (f *Fake) Screenshot(_ context.Context, vmi *v1.VirtualMachineInstance) (string, []byte, error) {
	if err := f.op("Screenshot", vmi); err != nil {
		return "", nil, err
	}
	return "image/x-portable-pixmap", []byte("P6\n1 1\n255\n\x00\x00\x00"), nil
}

// MemoryDump records the call and its path in DumpPath.
func (f *Fake) MemoryDump(_ context.Context, vmi *v1.VirtualMachineInstance, path string) error {
	f.mu.Lock()
	f.DumpPath = path
	f.mu.Unlock()
	return f.op("MemoryDump", vmi)
}

// Backup records the call and its options in BackupOpts.
func (f *Fake) Backup(_ context.Context, vmi *v1.VirtualMachineInstance, o *backupv1.BackupOptions) error {
	f.mu.Lock()
	f.BackupOpts = o
	f.mu.Unlock()
	return f.op("Backup", vmi)
}

// RedefineCheckpoint records the call and its checkpoint in Checkpoint
// and answers Invalid.
func (f *Fake) RedefineCheckpoint(_ context.Context, vmi *v1.VirtualMachineInstance, cp *backupv1.BackupCheckpoint) (bool, error) {
	f.mu.Lock()
	f.Checkpoint = cp
	invalid := f.Invalid
	f.mu.Unlock()
	return invalid, f.op("RedefineCheckpoint", vmi)
}

func (f *Fake) Migrate(_ context.Context, vmi *v1.VirtualMachineInstance, _ migration.Options) error {
	return f.op("Migrate", vmi)
}
func (f *Fake) CancelMigration(_ context.Context, vmi *v1.VirtualMachineInstance) error {
	return f.op("CancelMigration", vmi)
}
func (f *Fake) PrepareMigrationTarget(_ context.Context, vmi *v1.VirtualMachineInstance, o domain.SyncOptions) error {
	return f.record("PrepareMigrationTarget", vmi, o)
}
func (f *Fake) FinalizeMigration(_ context.Context, vmi *v1.VirtualMachineInstance, _ []string) error {
	return f.op("FinalizeMigration", vmi)
}
func (f *Fake) AbandonTarget() { _ = f.op("AbandonTarget", &v1.VirtualMachineInstance{}) }

var _ cmdserver.Manager = (*Fake)(nil)

// Start serves m on a socket in a temporary directory until the test ends
// and returns the socket path. The server skips its VMI validation on Sync
// (cmdserver.WithoutSyncValidation): the fakes' VMIs are minimal.
func Start(t testing.TB, m cmdserver.Manager) string {
	t.Helper()
	return StartWith(t, m, cmdserver.WithoutSyncValidation())
}

// StartWith is Start with exactly the server options opts.
func StartWith(t testing.TB, m cmdserver.Manager, opts ...cmdserver.Option) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "launcher-sock")
	lis, err := cmdserver.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cmdserver.New(m, slog.New(slog.NewTextHandler(io.Discard, nil)), opts...).Serve(ctx, lis)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("command server: %v", err)
		}
	})
	return sock
}
