package cmdserver_test

// These tests drive the real gRPC server over a real unix socket with the
// real client, but with a fake Manager: the real one (internal/domain) needs
// libvirt and QEMU and is tested with them in its own package. What is
// under test here is the wire behaviour of the server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start serves a server for m on a fresh socket and returns a connected
// client.
func start(t *testing.T, m cmdserver.Manager) (*cmdclient.Client, string) {
	t.Helper()
	return startWith(t, m, cmdserver.WithoutSyncValidation())
}

// startWith is start with the server's options given.
func startWith(t *testing.T, m cmdserver.Manager, opts ...cmdserver.Option) (*cmdclient.Client, string) {
	t.Helper()
	sock := cmdservertest.StartWith(t, m, opts...)
	c, err := cmdclient.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, sock
}

func testVMI() *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1", UID: "U"}}
}

func TestInfoAndPing(t *testing.T) {
	c, _ := start(t, &cmdservertest.Fake{})
	if c.Version != 1 {
		t.Errorf("negotiated version %d, want 1", c.Version)
	}
	resp, err := cmdinfo.NewCmdInfoClient(c.Conn()).Info(context.Background(), &cmdinfo.CmdInfoRequest{})
	if err != nil || len(resp.SupportedCmdVersions) != 1 || resp.SupportedCmdVersions[0] != 1 {
		t.Errorf("Info = %v, %v; want [1]", resp, err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestSyncConvertsOptions(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	opts := &cmdv1.VirtualMachineOptions{
		VirtualMachineSMBios:      &cmdv1.SMBios{Manufacturer: "KubeVirt", Product: "None", Family: "KubeVirt", Sku: "s", Version: "v"},
		MemBalloonStatsPeriod:     0,
		PreallocatedVolumes:       []string{"pvc1"},
		ClusterConfig:             &cmdv1.ClusterConfig{FreePageReportingDisabled: true, BochsDisplayForEFIGuests: true, SerialConsoleLogDisabled: true, PCINUMAAwareTopologyEnabled: true},
		InterfaceDomainAttachment: map[string]string{"default": "tap"},
		PluginsJson:               []byte("[]"),
		GraceHostDeviceAliases:    []string{"ua-gpu-g"},
	}
	if err := c.Sync(context.Background(), testVMI(), opts); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	got := m.Last()
	if got.Op != "Sync" || got.Name != "vm1" {
		t.Fatalf("manager saw %+v", got)
	}
	o := got.Opts
	if o.SMBIOS == nil || o.SMBIOS.Manufacturer != "KubeVirt" || o.SMBIOS.SKU != "s" || o.SMBIOS.Version != "v" {
		t.Errorf("SMBIOS = %+v", o.SMBIOS)
	}
	if o.MemBalloonStatsPeriod == nil || *o.MemBalloonStatsPeriod != 0 {
		t.Errorf("MemBalloonStatsPeriod = %v, want explicit 0", o.MemBalloonStatsPeriod)
	}
	if !o.FreePageReportingDisabled || !o.BochsDisplayForEFIGuests || !o.SerialConsoleLogDisabled {
		t.Errorf("cluster flags lost: %+v", o)
	}
	if len(o.PreallocatedVolumes) != 1 || o.InterfaceDomainAttachment["default"] != "tap" {
		t.Errorf("volumes/attachments lost: %+v", o)
	}
	if !o.PCIPlacement.NUMAAware || len(o.PCIPlacement.GraceAliases) != 1 || o.PCIPlacement.GraceAliases[0] != "ua-gpu-g" {
		t.Errorf("PCI placement options lost: %+v", o.PCIPlacement)
	}
}

func TestSyncFailures(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	raw := cmdv1.NewCmdClient(c.Conn())
	cases := []struct {
		name string
		req  *cmdv1.VMIRequest
		want string
	}{
		{"bad json", &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: []byte("{not json")}}, cmdserver.InvalidVMIMessage},
		{"no vmi", &cmdv1.VMIRequest{}, cmdserver.InvalidVMIMessage},
		{"bad plugins", &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: []byte(`{}`)},
			Options: &cmdv1.VirtualMachineOptions{PluginsJson: []byte("{")}}, "options.pluginsJson"},
		{"plugins", &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: []byte(`{}`)},
			Options: &cmdv1.VirtualMachineOptions{PluginsJson: []byte(`[{"name":"p"}]`)}}, "not supported by virtlauncher"},
	}
	for _, tc := range cases {
		resp, err := raw.SyncVirtualMachine(context.Background(), tc.req)
		if err != nil {
			t.Errorf("%s: gRPC error %v, want a Response", tc.name, err)
			continue
		}
		if resp.Success || !strings.Contains(resp.Message, tc.want) {
			t.Errorf("%s: Response %+v, want failure containing %q", tc.name, resp, tc.want)
		}
	}
	if len(m.Ops) != 0 {
		t.Errorf("manager called on bad input: %+v", m.Ops)
	}
}

func TestLifecycleOps(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	ctx := context.Background()
	ops := []struct {
		op string
		fn func(context.Context, *v1.VirtualMachineInstance) error
	}{
		{"Pause", c.Pause}, {"Unpause", c.Unpause}, {"Shutdown", c.Shutdown}, {"Kill", c.Kill},
		{"Delete", c.Delete}, {"Reset", c.Reset}, {"SoftReboot", c.SoftReboot},
	}
	for _, o := range ops {
		m.Err = nil
		if err := o.fn(ctx, testVMI()); err != nil {
			t.Errorf("%s: %v", o.op, err)
		}
		if got := m.Last(); got.Op != o.op || got.Name != "vm1" {
			t.Errorf("%s: manager saw %+v", o.op, got)
		}
		m.Err = errors.New("domain is gone: " + o.op)
		if err := o.fn(ctx, testVMI()); err == nil || !strings.Contains(err.Error(), "domain is gone: "+o.op) {
			t.Errorf("%s with failing manager: err = %v", o.op, err)
		}
		// An error with an empty text must still reach the handler as a
		// failure (empty message would read as success).
		m.Err = errors.New("")
		if err := o.fn(ctx, testVMI()); err == nil {
			t.Errorf("%s with empty error text: reported success", o.op)
		}
	}
}

func TestGetDomainStatsVersion(t *testing.T) {
	m := &cmdservertest.Fake{Stats: []byte(`{"Name":"ns1_vm1"}`)}
	c, _ := start(t, m)
	ctx := context.Background()
	if d, exists, err := c.GetDomain(ctx); err != nil || exists || d != nil {
		t.Errorf("no domain: got %v %v %v", d, exists, err)
	}
	m.Dom = domainjson.Gone("vm1", "ns1", domainjson.Metadata{UID: "U"}, time.Now())
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists || d.Name != "vm1" || d.Spec.Metadata.KubeVirt.UID != "U" || d.DeletionTimestamp == nil {
		t.Errorf("GetDomain = %+v %v %v", d, exists, err)
	}
	if s, err := c.GetDomainStats(ctx); err != nil || s != `{"Name":"ns1_vm1"}` {
		t.Errorf("GetDomainStats = %q, %v", s, err)
	}
	if _, err := c.GetQemuVersion(ctx); err == nil {
		t.Errorf("GetQemuVersion with no version succeeded")
	}
	resp, err := cmdv1.NewCmdClient(c.Conn()).GetQemuVersion(ctx, &cmdv1.EmptyRequest{})
	if err != nil || resp.Response.Success || resp.Response.Message == "" {
		t.Errorf("raw GetQemuVersion without version = %+v, %v", resp, err)
	}
	m.Version = "7.2.0"
	if v, err := c.GetQemuVersion(ctx); err != nil || v != "7.2.0" {
		t.Errorf("GetQemuVersion = %q, %v", v, err)
	}
	m.Err = errors.New("libvirt down")
	if _, _, err := c.GetDomain(ctx); err == nil || !strings.Contains(err.Error(), "libvirt down") {
		t.Errorf("GetDomain with failing manager: %v", err)
	}
}

// TestUnsupportedRPCs walks every method of the Cmd service descriptor:
// each one not implemented must answer a failure with a non-empty message
// (or, where grpcErr says, the gRPC error KubeVirt uses).
func TestUnsupportedRPCs(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	implemented := map[string]bool{
		"SyncVirtualMachine": true, "PauseVirtualMachine": true, "UnpauseVirtualMachine": true,
		"ResetVirtualMachine": true, "SoftRebootVirtualMachine": true, "ShutdownVirtualMachine": true,
		"KillVirtualMachine": true, "DeleteVirtualMachine": true, "GetDomain": true,
		"GetDomainStats": true, "Ping": true, "GetQemuVersion": true, "GetDomainDirtyRateStats": true, "GetVMStats": true, // vmstats_test.go
		// answered by the Manager or with nothing to do (hotplug_test.go)
		"SyncVirtualMachineCPUs": true, "SyncVirtualMachineMemory": true, "HotplugHostDevices": true, "CancelVirtualMachineMigration": true,
		"SignalTargetPodCleanup": true, "GetScreenshot": true,
		// live migration (hotplug_test.go; MigrateVirtualMachine: TestMigrateRPC)
		"SyncMigrationTarget": true, "FinalizeVirtualMachineMigration": true, "MigrateVirtualMachine": true,
		// the guest agent's (guestagent_test.go)
		"GetGuestInfo": true, "GetUsers": true, "GetFilesystems": true, "Exec": true, "GuestPing": true,
		"FreezeVirtualMachine": true, "UnfreezeVirtualMachine": true,
		"VirtualMachineMemoryDump": true,                             // memorydump_test.go
		"BackupVirtualMachine":     true, "RedefineCheckpoint": true, // backup_test.go
	}
	grpcErr := map[string]codes.Code{}
	svc := cmdv1.File_cmd_v1_cmd_proto.Services().ByName("Cmd")
	methods := svc.Methods()
	if methods.Len() != 36 {
		t.Fatalf("Cmd has %d methods", methods.Len())
	}
	checked := 0
	for i := 0; i < methods.Len(); i++ {
		md := methods.Get(i)
		name := string(md.Name())
		if implemented[name] {
			continue
		}
		checked++
		out := dynamicpb.NewMessage(md.Output())
		err := c.Conn().Invoke(context.Background(), "/kubevirt.cmd.v1.Cmd/"+name, dynamicpb.NewMessage(md.Input()), out)
		if code, ok := grpcErr[name]; ok {
			if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), "not supported by virtlauncher") {
				t.Errorf("%s: err = %v, want %s 'not supported'", name, err, code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: gRPC error %v, want a failure Response", name, err)
			continue
		}
		resp := out
		if md.Output().FullName() != "kubevirt.cmd.v1.Response" {
			f := md.Output().Fields().ByName("response")
			if !out.Has(f) {
				t.Errorf("%s: no response sub-message (handler would read success)", name)
				continue
			}
			resp = out.Get(f).Message().Interface().(*dynamicpb.Message)
		}
		fields := resp.Descriptor().Fields()
		success := resp.Get(fields.ByName(protoreflect.Name("success"))).Bool()
		msg := resp.Get(fields.ByName("message")).String()
		if success || msg != name+" is not supported by virtlauncher" {
			t.Errorf("%s: success=%v message=%q", name, success, msg)
		}
	}
	if checked != 3 {
		t.Errorf("checked %d unsupported RPCs, want 3", checked)
	}
	if len(m.Ops) != 0 {
		t.Errorf("unsupported RPCs reached the manager: %+v", m.Ops)
	}
}

// TestNoGlobalLock: Ping and GetDomain answer while a Sync is blocked.
func TestNoGlobalLock(t *testing.T) {
	m := &cmdservertest.Fake{SyncGate: make(chan struct{}), SyncIn: make(chan struct{}, 1)}
	c, _ := start(t, m)
	syncDone := make(chan error, 1)
	go func() { syncDone <- c.Sync(context.Background(), testVMI(), nil) }()
	<-m.SyncIn
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		t.Errorf("Ping during Sync: %v", err)
	}
	if _, _, err := c.GetDomain(ctx); err != nil {
		t.Errorf("GetDomain during Sync: %v", err)
	}
	select {
	case err := <-syncDone:
		t.Fatalf("Sync returned early: %v", err)
	default:
	}
	close(m.SyncGate)
	if err := <-syncDone; err != nil {
		t.Errorf("Sync: %v", err)
	}
}

func TestOversizedMessageRejected(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	big := make([]byte, cmdserver.MaxMessageSize+1024)
	_, err := cmdv1.NewCmdClient(c.Conn()).SyncVirtualMachine(context.Background(),
		&cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: big}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized Sync: err = %v, want ResourceExhausted", err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Errorf("Ping after oversized message: %v", err)
	}
	if len(m.Ops) != 0 {
		t.Errorf("oversized message reached the manager")
	}
}

func TestPanicIsContained(t *testing.T) {
	m := &cmdservertest.Fake{PanicOn: "Pause"}
	c, _ := start(t, m)
	err := c.Pause(context.Background(), testVMI())
	if err == nil || !strings.Contains(err.Error(), "Internal") {
		t.Errorf("Pause with panicking manager: %v", err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Errorf("Ping after panic: %v", err)
	}
}

func TestListenPermissions(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	sock := filepath.Join(dir, "launcher-init-sock")
	// A stale socket from an earlier run is replaced.
	stale, err := cmdserver.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.Close()
	lis, err := cmdserver.Listen(sock)
	if err != nil {
		t.Fatalf("Listen over stale socket: %v", err)
	}
	defer lis.Close()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want socket 0600", fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("leftovers next to the socket: %v", entries)
	}
	regular := filepath.Join(dir, "file")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cmdserver.Listen(regular); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a regular file: %v", err)
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	lis, err := cmdserver.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cmdserver.New(&cmdservertest.Fake{}, quietLog(), cmdserver.WithoutSyncValidation()).Serve(ctx, lis)
	}()
	c, err := cmdclient.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not stop")
	}
	if err := c.Ping(context.Background()); err == nil {
		t.Errorf("Ping after stop succeeded")
	}
}

// TestVMICallsBounded: with MaxVMICalls Syncs in
// flight one more is refused at once (ResourceExhausted) instead of
// holding another decoded VMI; Ping still answers, and once the Syncs end
// a Sync is accepted again.
func TestVMICallsBounded(t *testing.T) {
	m := &cmdservertest.Fake{SyncGate: make(chan struct{}), SyncIn: make(chan struct{}, cmdserver.MaxVMICalls)}
	c, _ := start(t, m)
	done := make(chan error, cmdserver.MaxVMICalls)
	for range cmdserver.MaxVMICalls {
		go func() { done <- c.Sync(context.Background(), testVMI(), nil) }()
	}
	for range cmdserver.MaxVMICalls {
		<-m.SyncIn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.Sync(ctx, testVMI(), nil)
	// cmdclient names the gRPC code in its message.
	if msg := fmt.Sprint(err); !strings.Contains(msg, "ResourceExhausted") || !strings.Contains(msg, "in flight") {
		t.Errorf("Sync beyond the bound: %v, want ResourceExhausted", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("Ping with the bound reached: %v", err)
	}
	close(m.SyncGate)
	for range cmdserver.MaxVMICalls {
		if err := <-done; err != nil {
			t.Errorf("a Sync within the bound: %v", err)
		}
	}
	if err := c.Sync(ctx, testVMI(), nil); err != nil {
		t.Errorf("Sync after the others ended: %v", err)
	}
}

// TestMigrateRPC: MigrateVirtualMachine needs its options (KubeVirt's
// message without them), passes them decoded to the Manager, and answers
// the Manager's verdict.
func TestMigrateRPC(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	cc := cmdv1.NewCmdClient(c.Conn())
	ctx := context.Background()
	vr := vmiRequest(t, testVMI())
	resp, err := cc.MigrateVirtualMachine(ctx, &cmdv1.MigrationRequest{Vmi: vr.Vmi})
	if err != nil || resp.GetSuccess() || resp.GetMessage() != "migration options object not present in command server request" {
		t.Errorf("no options: %+v, %v", resp, err)
	}
	if len(m.Ops) != 0 {
		t.Errorf("the Manager was asked without options: %+v", m.Ops)
	}
	opts := []byte(`{"Bandwidth":"0","ProgressTimeout":150,"CompletionTimeoutPerGiB":150}`)
	resp, err = cc.MigrateVirtualMachine(ctx, &cmdv1.MigrationRequest{Vmi: vr.Vmi, Options: opts})
	if err != nil || !resp.GetSuccess() || m.Last().Op != "Migrate" {
		t.Errorf("with options: %+v, %v, calls %+v", resp, err, m.Ops)
	}
	m.Err = errors.New("cannot migrate VMI until migrationState is ready")
	resp, _ = cc.MigrateVirtualMachine(ctx, &cmdv1.MigrationRequest{Vmi: vr.Vmi, Options: opts})
	if resp.GetSuccess() || resp.GetMessage() != m.Err.Error() {
		t.Errorf("a Manager failure answered %+v", resp)
	}
}
