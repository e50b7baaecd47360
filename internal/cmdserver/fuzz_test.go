package cmdserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/migration"
)

// nopManager accepts everything; the fuzz target is about the server's
// decoding, not the domain.
type nopManager struct{}

func (nopManager) Sync(context.Context, *v1.VirtualMachineInstance, domain.SyncOptions) error {
	return nil
}
func (nopManager) Pause(context.Context, *v1.VirtualMachineInstance) error      { return nil }
func (nopManager) Unpause(context.Context, *v1.VirtualMachineInstance) error    { return nil }
func (nopManager) Shutdown(context.Context, *v1.VirtualMachineInstance) error   { return nil }
func (nopManager) Kill(context.Context, *v1.VirtualMachineInstance) error       { return nil }
func (nopManager) Delete(context.Context, *v1.VirtualMachineInstance) error     { return nil }
func (nopManager) Reset(context.Context, *v1.VirtualMachineInstance) error      { return nil }
func (nopManager) SoftReboot(context.Context, *v1.VirtualMachineInstance) error { return nil }
func (nopManager) Domain(context.Context) (*domainjson.Domain, error)           { return nil, nil }
func (nopManager) DomainStats(context.Context) ([]byte, error)                  { return nil, nil }
func (nopManager) AgentData(context.Context, string) (string, error)            { return "", nil }
func (nopManager) DirtyRate(context.Context) (domain.StatsDirtyRate, error) {
	return domain.StatsDirtyRate{}, nil
}
func (nopManager) QemuVersion(context.Context) (string, error)                  { return "", nil }
func (nopManager) SyncVCPUs(context.Context, *v1.VirtualMachineInstance) error  { return nil }
func (nopManager) SyncMemory(context.Context, *v1.VirtualMachineInstance) error { return nil }
func (nopManager) MemoryDump(context.Context, *v1.VirtualMachineInstance, string) error {
	return nil
}
func (nopManager) Backup(context.Context, *v1.VirtualMachineInstance, *backupv1.BackupOptions) error {
	return nil
}
func (nopManager) RedefineCheckpoint(context.Context, *v1.VirtualMachineInstance, *backupv1.BackupCheckpoint) (bool, error) {
	return false, nil
}
func (nopManager) HotplugHostDevices(context.Context, *v1.VirtualMachineInstance) error {
	return nil
}
func (nopManager) Exec(context.Context, string, string, []string, time.Duration) (string, error) {
	return "", nil
}
func (nopManager) GuestPing(context.Context, string) error { return nil }
func (nopManager) Freeze(context.Context, *v1.VirtualMachineInstance, time.Duration) error {
	return nil
}
func (nopManager) Unfreeze(context.Context, *v1.VirtualMachineInstance) error { return nil }
func (nopManager) Screenshot(context.Context, *v1.VirtualMachineInstance) (string, []byte, error) {
	return "", nil, nil
}
func (nopManager) Migrate(context.Context, *v1.VirtualMachineInstance, migration.Options) error {
	return nil
}
func (nopManager) CancelMigration(context.Context, *v1.VirtualMachineInstance) error { return nil }
func (nopManager) PrepareMigrationTarget(context.Context, *v1.VirtualMachineInstance, domain.SyncOptions) error {
	return nil
}
func (nopManager) FinalizeMigration(context.Context, *v1.VirtualMachineInstance, []string) error {
	return nil
}
func (nopManager) AbandonTarget() {}

// FuzzVMIRequest feeds arbitrary bytes, as a VMIRequest protobuf and as the
// VMI JSON inside one, through the handlers' decode path: protobuf
// decoding, VMI JSON decoding, the Sync options and the Sync validation.
// Beyond "never panics": a failure always carries a message, and a Sync
// the server lets through is a VMI that validates. Seeds live in
// testdata/fuzz/FuzzVMIRequest; a long run is
// `go test -run='^$' -fuzz=FuzzVMIRequest -fuzztime=10m ./internal/cmdserver`.
func FuzzVMIRequest(f *testing.F) {
	s := New(nopManager{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := &cmdServer{s: s}
	f.Fuzz(func(t *testing.T, reqBytes, vmiJSON []byte) {
		tm := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("input took over 10s: %q %q", reqBytes, vmiJSON)) })
		defer tm.Stop()
		var reqs []*cmdv1.VMIRequest
		req := &cmdv1.VMIRequest{}
		if err := proto.Unmarshal(reqBytes, req); err == nil {
			reqs = append(reqs, req)
		}
		reqs = append(reqs, &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: vmiJSON}})
		if len(reqs) == 2 {
			withJSON := proto.Clone(reqs[0]).(*cmdv1.VMIRequest)
			withJSON.Vmi = &cmdv1.VMI{VmiJson: vmiJSON}
			reqs = append(reqs, withJSON)
		}
		ctx := context.Background()
		for _, r := range reqs {
			// The handlers consume the request's VMI JSON: each gets a copy.
			resp, err := c.SyncVirtualMachine(ctx, proto.Clone(r).(*cmdv1.VMIRequest))
			if err != nil {
				t.Fatalf("Sync returned a gRPC error: %v", err)
			}
			if !resp.Success && resp.Message == "" {
				t.Fatalf("Sync failed with an empty message")
			}
			if resp.Success {
				v, _, err := decodeVMI(r.GetVmi())
				if err != nil {
					t.Fatalf("Sync succeeded on a VMI that does not decode: %v", err)
				}
				if err := ValidateSyncVMI(v); err != nil {
					t.Fatalf("Sync succeeded on an invalid VMI: %v", err)
				}
			}
			resp, err = c.PauseVirtualMachine(ctx, proto.Clone(r).(*cmdv1.VMIRequest))
			if err != nil || (!resp.Success && resp.Message == "") {
				t.Fatalf("Pause: %v %+v", err, resp)
			}
		}
	})
}

// TestFuzzSeedsPresent: the committed corpus exists and holds a request
// that the server accepts, so the seeds reach past the decoding.
func TestFuzzSeedsPresent(t *testing.T) {
	files, _ := filepath.Glob("testdata/fuzz/FuzzVMIRequest/*")
	if len(files) < 5 {
		t.Fatalf("%d seeds in testdata/fuzz/FuzzVMIRequest, want at least 5", len(files))
	}
	b, err := os.ReadFile("testdata/fuzz/FuzzVMIRequest/valid-vmi")
	if err != nil || !strings.HasPrefix(string(b), "go test fuzz v1\n") {
		t.Fatalf("seed valid-vmi: %v", err)
	}
}
