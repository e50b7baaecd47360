package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
)

// checkStats checks GetDomainStats of the running test VMI as virt-handler's
// collectors read it (KubeVirt's stats.DomainStats keys): the disks named
// by the VMI's volume names, one Vcpu entry per possible vCPU (maxSockets x
// cores x threads) of which the booted ones report time and the others are
// offline, and one CPUMap row per booted vCPU.
func checkStats(t *testing.T, ctx context.Context, c *cmdclient.Client, v *v1.VirtualMachineInstance, domName string) {
	t.Helper()
	s, err := c.GetDomainStats(ctx)
	if err != nil {
		t.Fatalf("GetDomainStats: %v", err)
	}
	var st struct {
		Name string
		Cpu  struct{ TimeSet bool } //nolint:revive // KubeVirt's key.
		Vcpu []struct {
			StateSet, TimeSet bool
			State             int
		}
		Block []struct {
			Name, Alias string
			RdBytesSet  bool
		}
		CPUMapSet bool
		CPUMap    [][]bool
	}
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		t.Fatalf("stats JSON: %v\n%s", err, s)
	}
	if st.Name != domName || !st.Cpu.TimeSet {
		t.Errorf("stats name %q, cpu %+v", st.Name, st.Cpu)
	}
	cpu := v.Spec.Domain.CPU
	if cpu == nil || cpu.MaxSockets <= cpu.Sockets {
		t.Fatalf("test VMI without CPU hotplug room: %+v", cpu)
	}
	booted := int(cpu.Sockets * cpu.Cores * cpu.Threads)
	possible := int(cpu.MaxSockets * cpu.Cores * cpu.Threads)
	if len(st.Vcpu) != possible {
		t.Errorf("%d Vcpu entries, want maxSockets x cores x threads = %d", len(st.Vcpu), possible)
	}
	for i, vc := range st.Vcpu {
		if i < booted && !vc.TimeSet {
			t.Errorf("booted vCPU %d has no time: %+v", i, vc)
		}
		if i >= booted && (vc.TimeSet || !vc.StateSet || vc.State != 0) {
			t.Errorf("vCPU %d beyond the booted %d not offline: %+v", i, booted, vc)
		}
	}
	if !st.CPUMapSet || len(st.CPUMap) != booted {
		t.Errorf("CPUMapSet %v, %d rows, want %d", st.CPUMapSet, len(st.CPUMap), booted)
	}
	for i, row := range st.CPUMap {
		if !slices.Contains(row, true) {
			t.Errorf("vCPU %d may run on no host CPU: %v", i, row)
		}
	}
	aliases := map[string]bool{}
	for _, b := range st.Block {
		aliases[b.Alias] = true
		if b.Alias == "root" && !b.RdBytesSet {
			t.Errorf("root disk without read stats: %+v", b)
		}
	}
	for _, d := range v.Spec.Domain.Devices.Disks {
		if !aliases[d.Name] {
			t.Errorf("no Block entry with alias %q (the VMI's disk name): %+v", d.Name, st.Block)
		}
	}
}

// checkNothingToDo calls the RPCs virt-handler sends to a running VMI that
// have nothing to do for it: each succeeds. More vCPUs than the domain's
// maximum fail naming the figures.
func checkNothingToDo(t *testing.T, ctx context.Context, c *cmdclient.Client, v *v1.VirtualMachineInstance) {
	t.Helper()
	req := func(v *v1.VirtualMachineInstance) *cmdv1.VMIRequest {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: b}}
	}
	cc := cmdv1.NewCmdClient(c.Conn())
	for name, call := range map[string]func(context.Context, *cmdv1.VMIRequest) (*cmdv1.Response, error){
		"SyncVirtualMachineCPUs": func(ctx context.Context, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return cc.SyncVirtualMachineCPUs(ctx, r)
		},
		"HotplugHostDevices": func(ctx context.Context, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return cc.HotplugHostDevices(ctx, r)
		},
		"SignalTargetPodCleanup": func(ctx context.Context, r *cmdv1.VMIRequest) (*cmdv1.Response, error) {
			return cc.SignalTargetPodCleanup(ctx, r)
		},
	} {
		if resp, err := call(ctx, req(v)); err != nil || !resp.GetSuccess() {
			t.Errorf("%s with nothing to do: %+v, %v", name, resp, err)
		}
	}
	// With no migration there is nothing to cancel, and that is no error
	// (KubeVirt v1.9; v1.8 answered "vmi is not migrating").
	if resp, err := cc.CancelVirtualMachineMigration(ctx, req(v)); err != nil || !resp.GetSuccess() {
		t.Errorf("CancelVirtualMachineMigration with no migration: %+v, %v", resp, err)
	}
	// More sockets than maxSockets cannot be (test/conformance TestHotplug
	// adds one that can).
	more := v.DeepCopy()
	more.Spec.Domain.CPU.Sockets = more.Spec.Domain.CPU.MaxSockets + 1
	resp, err := cc.SyncVirtualMachineCPUs(ctx, req(more))
	if err != nil || resp.GetSuccess() || !strings.Contains(resp.GetMessage(), "more than the") {
		t.Errorf("SyncVirtualMachineCPUs with more sockets than maxSockets: %+v, %v", resp, err)
	}

	// The test VMI has KubeVirt's default VNC display: libvirt's image and
	// MIME type come through unchanged, as KubeVirt's launcher passes them
	// (PNG from QEMU 7.2; PPM from a QEMU that cannot write PNG).
	shot, err := cc.GetScreenshot(ctx, req(v))
	if err != nil || !shot.GetResponse().GetSuccess() {
		t.Fatalf("GetScreenshot: %+v, %v", shot.GetResponse(), err)
	}
	magic := map[string]string{"image/png": "\x89PNG\r\n\x1a\n", "image/x-portable-pixmap": "P6\n"}[shot.Mime]
	if magic == "" || !strings.HasPrefix(string(shot.Data), magic) || len(shot.Data) < 100 {
		t.Errorf("screenshot mime %q, %d bytes starting %q", shot.Mime, len(shot.Data), shot.Data[:min(len(shot.Data), 16)])
	}
}
