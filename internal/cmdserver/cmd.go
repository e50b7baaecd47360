package cmdserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// InvalidVMIMessage is KubeVirt's message for a VMI that does not decode.
const InvalidVMIMessage = "No valid vmi object present in command server request"

type cmdServer struct {
	cmdv1.UnimplementedCmdServer
	s *Server
}

func ok() *cmdv1.Response { return &cmdv1.Response{Success: true} }

// fail makes a failure Response; the message is never empty, because
// virt-handler counts success=false with an empty message as success.
func fail(msg string) *cmdv1.Response {
	if msg == "" {
		msg = "unspecified failure"
	}
	return &cmdv1.Response{Success: false, Message: msg}
}

func notSupported(rpc string) string { return rpc + " is not supported by virtlauncher" }

// decodeVMI reads the VMI JSON as KubeVirt's launcher does, leniently:
// fields a newer virt-handler knows and kubevirt.io/api here does not are
// dropped (and returned, for the log). It goes through vmi.ParseLenient,
// not a plain json.Unmarshal, for its guards: a hostile quantity such as
// memory "1e999999999" decodes fine with encoding/json and then spins a CPU
// for minutes in the first arithmetic on it; ParseLenient refuses it, and
// bounds size and nesting depth.
func decodeVMI(v *cmdv1.VMI) (*v1.VirtualMachineInstance, []string, error) {
	if v == nil || len(v.VmiJson) == 0 {
		return nil, nil, fmt.Errorf("empty vmi")
	}
	return vmi.ParseLenient(v.VmiJson)
}

// ValidateSyncVMI checks a VMI received for Sync before anything is made
// for it: a VMI from virt-handler was admitted by the cluster, but the
// socket is the launcher's trust boundary, and a bad value found only
// while disks are being prepared would leave half the disks behind. The
// VMI is checked as vmi.Load would check a manifest, on a copy with
// KubeVirt's defaults filled in, so that a field the cluster leaves unset
// is not refused; the caller keeps using v unchanged.
func ValidateSyncVMI(v *v1.VirtualMachineInstance) error {
	c := v.DeepCopy()
	vmi.SetDefaults(c, vmi.Options{})
	err := vmi.Validate(c)
	if err == nil {
		return nil
	}
	var reasons []string
	for _, fe := range vmi.FieldErrors(err) {
		reasons = append(reasons, fe.Error())
	}
	if len(reasons) == 0 {
		reasons = append(reasons, err.Error())
	}
	return fmt.Errorf("invalid VMI %s/%s: %s", v.Namespace, v.Name, strings.Join(reasons, "; "))
}

// vmiOp runs one VMI-scoped Manager operation and shapes the reply.
func (c *cmdServer) vmiOp(ctx context.Context, rpc string, req *cmdv1.VMIRequest,
	op func(context.Context, *v1.VirtualMachineInstance) error) (*cmdv1.Response, error) {
	return c.checkedVMIOp(ctx, rpc, req, nil, op)
}

// checkedVMIOp is vmiOp with check run on the decoded VMI first. It
// consumes req's VMI JSON (set to nil once decoded).
func (c *cmdServer) checkedVMIOp(ctx context.Context, rpc string, req *cmdv1.VMIRequest,
	check func(*v1.VirtualMachineInstance) error, op func(context.Context, *v1.VirtualMachineInstance) error) (*cmdv1.Response, error) {
	vmi, ignored, err := decodeVMI(req.GetVmi())
	if v := req.GetVmi(); v != nil {
		// The bytes are decoded: let the GC have them while the call
		// waits for the domain's operation lock.
		v.VmiJson = nil
	}
	if err != nil {
		c.s.log.Error("failed to decode vmi", "rpc", rpc, "reason", err.Error())
		// KubeVirt's message, then the reason (virt-handler only logs it).
		return fail(InvalidVMIMessage + ": " + err.Error()), nil
	}
	if len(ignored) > 0 {
		c.s.log.Info("ignored VMI fields unknown to this launcher", "rpc", rpc, "fields", strings.Join(ignored, ","))
	}
	if check != nil {
		if err := check(vmi); err != nil {
			c.s.log.Error(rpc+" refused", "kind", "VirtualMachineInstance", "name", vmi.Name,
				"namespace", vmi.Namespace, "uid", string(vmi.UID), "reason", err.Error())
			return fail(err.Error()), nil
		}
	}
	// Decoded and checked: the next call may decode its message while
	// this one waits for the domain.
	decoded(ctx)
	if err := op(ctx, vmi); err != nil {
		c.s.log.Error(rpc+" failed", "kind", "VirtualMachineInstance", "name", vmi.Name,
			"namespace", vmi.Namespace, "uid", string(vmi.UID), "reason", err.Error())
		return fail(err.Error()), nil
	}
	return ok(), nil
}

func (c *cmdServer) SyncVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.syncOp(ctx, "SyncVirtualMachine", req, c.s.m.Sync)
}

// syncOp runs op with the request's Sync options and a VMI checked as a
// Sync checks it (SyncVirtualMachine, SyncMigrationTarget).
func (c *cmdServer) syncOp(ctx context.Context, rpc string, req *cmdv1.VMIRequest,
	op func(context.Context, *v1.VirtualMachineInstance, domain.SyncOptions) error) (*cmdv1.Response, error) {
	opts, err := syncOptions(req.GetOptions())
	if err != nil {
		return fail(err.Error()), nil
	}
	var check func(*v1.VirtualMachineInstance) error
	if !c.s.skipSyncValidation {
		check = ValidateSyncVMI
	}
	return c.checkedVMIOp(ctx, rpc, req, check, func(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
		return op(ctx, vmi, opts)
	})
}

// syncOptions converts the options virt-handler sends with Sync. The host
// topology places dedicated CPUs (as KubeVirt's launcher uses it);
// DisksInfo (always empty now), interfaceMigration and the Grace/vGPU
// switches have no use in virtlauncher and are ignored; domain-mutation
// plugins cannot be honoured, so a non-empty plugin list fails the Sync.
func syncOptions(o *cmdv1.VirtualMachineOptions) (domain.SyncOptions, error) {
	var so domain.SyncOptions
	if o == nil {
		return so, nil
	}
	if sm := o.GetVirtualMachineSMBios(); sm != nil {
		so.SMBIOS = &facts.SMBIOS{Manufacturer: sm.Manufacturer, Product: sm.Product,
			Version: sm.Version, SKU: sm.Sku, Family: sm.Family}
	}
	// proto3 has no presence for scalars; with options present the handler
	// always sets the period (0 means "no stats").
	period := o.GetMemBalloonStatsPeriod()
	so.MemBalloonStatsPeriod = &period
	so.PreallocatedVolumes = o.GetPreallocatedVolumes()
	if cc := o.GetClusterConfig(); cc != nil {
		so.FreePageReportingDisabled = cc.FreePageReportingDisabled
		so.BochsDisplayForEFIGuests = cc.BochsDisplayForEFIGuests
		so.SerialConsoleLogDisabled = cc.SerialConsoleLogDisabled
		so.PCIPlacement.NUMAAware = cc.PCINUMAAwareTopologyEnabled
	}
	so.PCIPlacement.GraceAliases = o.GetGraceHostDeviceAliases()
	so.InterfaceDomainAttachment = o.GetInterfaceDomainAttachment()
	for _, cell := range o.GetTopology().GetNumaCells() {
		fc := facts.NUMACell{ID: uint(cell.GetId())}
		for _, cpu := range cell.GetCpus() {
			hc := facts.HostCPU{ID: uint(cpu.GetId())}
			for _, s := range cpu.GetSiblings() {
				hc.Siblings = append(hc.Siblings, uint(s))
			}
			fc.CPUs = append(fc.CPUs, hc)
		}
		so.HostNUMA = append(so.HostNUMA, fc)
	}
	if p := o.GetPluginsJson(); len(p) > 0 {
		var plugins []json.RawMessage
		if err := json.Unmarshal(p, &plugins); err != nil {
			return so, fmt.Errorf("options.pluginsJson: not a JSON list of plugins: %w", err)
		}
		if len(plugins) > 0 {
			return so, fmt.Errorf("options.pluginsJson: %d domain-mutation plugin(s) requested; plugins are not supported by virtlauncher", len(plugins))
		}
	}
	return so, nil
}

func (c *cmdServer) PauseVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "PauseVirtualMachine", req, c.s.m.Pause)
}

func (c *cmdServer) UnpauseVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "UnpauseVirtualMachine", req, c.s.m.Unpause)
}

func (c *cmdServer) ResetVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "ResetVirtualMachine", req, c.s.m.Reset)
}

func (c *cmdServer) SoftRebootVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "SoftRebootVirtualMachine", req, c.s.m.SoftReboot)
}

func (c *cmdServer) ShutdownVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "ShutdownVirtualMachine", req, c.s.m.Shutdown)
}

func (c *cmdServer) KillVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "KillVirtualMachine", req, c.s.m.Kill)
}

func (c *cmdServer) DeleteVirtualMachine(ctx context.Context, req *cmdv1.VMIRequest) (*cmdv1.Response, error) {
	return c.vmiOp(ctx, "DeleteVirtualMachine", req, c.s.m.Delete)
}

func (c *cmdServer) Ping(context.Context, *cmdv1.EmptyRequest) (*cmdv1.Response, error) {
	return ok(), nil
}

func (c *cmdServer) GetDomain(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.DomainResponse, error) {
	d, err := c.s.m.Domain(ctx)
	if err != nil {
		c.s.log.Error("GetDomain failed", "reason", err.Error())
		return &cmdv1.DomainResponse{Response: fail(err.Error())}, nil
	}
	if d == nil {
		// An empty domain string means "no domain" to virt-handler.
		return &cmdv1.DomainResponse{Response: ok()}, nil
	}
	data, err := json.Marshal(d)
	if err != nil {
		return &cmdv1.DomainResponse{Response: fail(fmt.Sprintf("encode domain: %v", err))}, nil
	}
	return &cmdv1.DomainResponse{Response: ok(), Domain: string(data)}, nil
}

func (c *cmdServer) GetDomainStats(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.DomainStatsResponse, error) {
	stats, err := c.s.m.DomainStats(ctx)
	if err != nil {
		return &cmdv1.DomainStatsResponse{Response: fail(err.Error())}, nil
	}
	return &cmdv1.DomainStatsResponse{Response: ok(), DomainStats: string(stats)}, nil
}

func (c *cmdServer) GetQemuVersion(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.QemuVersionResponse, error) {
	v, err := c.s.m.QemuVersion(ctx)
	if err != nil {
		return &cmdv1.QemuVersionResponse{Response: fail(err.Error())}, nil
	}
	if v == "" {
		return &cmdv1.QemuVersionResponse{Response: fail("QEMU version is not known")}, nil
	}
	return &cmdv1.QemuVersionResponse{Response: ok(), Version: v}, nil
}

// probeBound is how long a probe RPC may work: virt-handler's client waits
// the probe's timeoutSeconds (at least 1 s) and gives up, so the launcher
// stops too, a second later, rather than keep libvirt's agent job (which
// the poller and the next probe wait for) busy with an agent that does not
// answer.
func probeBound(timeoutSeconds int32) time.Duration {
	return time.Duration(max(timeoutSeconds, 1))*time.Second + time.Second
}

// Exec runs a command in the guest through its agent (virt-handler's exec
// probes). As in KubeVirt, a command that ran answers success with its exit
// code and output, whatever the code; any other failure (no agent, a
// timeout) answers a gRPC error, which is what virt-handler's client reads.
func (c *cmdServer) Exec(ctx context.Context, req *cmdv1.ExecRequest) (*cmdv1.ExecResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, probeBound(req.TimeoutSeconds))
	defer cancel()
	out, err := c.s.m.Exec(ctx, req.DomainName, req.Command, req.Args, time.Duration(req.TimeoutSeconds)*time.Second)
	var exit agent.ExitError
	switch {
	case err == nil:
		return &cmdv1.ExecResponse{Response: ok(), StdOut: out}, nil
	case errors.As(err, &exit):
		return &cmdv1.ExecResponse{Response: ok(), StdOut: out, ExitCode: int32(exit.Code)}, nil
	}
	c.s.log.Warn("exec in the guest failed", "command", req.Command, "reason", err.Error())
	return &cmdv1.ExecResponse{Response: fail(err.Error())}, status.Error(codes.Unknown, err.Error())
}

// GuestPing asks the guest agent for a ping (virt-handler's
// guestAgentPing probes); a failure is a gRPC error, as in KubeVirt.
func (c *cmdServer) GuestPing(ctx context.Context, req *cmdv1.GuestPingRequest) (*cmdv1.GuestPingResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, probeBound(req.TimeoutSeconds))
	defer cancel()
	if err := c.s.m.GuestPing(ctx, req.DomainName); err != nil {
		c.s.log.Warn("guest agent ping probe failed", "reason", err.Error())
		return &cmdv1.GuestPingResponse{Response: fail(err.Error())}, status.Error(codes.Unknown, err.Error())
	}
	return &cmdv1.GuestPingResponse{Response: ok()}, nil
}
