// Package cmdclient is a client for the launcher's command socket that
// behaves like virt-handler's (kubevirt-wire.md 1.1-1.5): it dials the unix
// socket with a 2 s connect limit, negotiates the version with CmdInfo.Info,
// calls each RPC with virt-handler's deadline and reads the replies the way
// virt-handler does. vlctl and the tests use it.
package cmdclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// Deadlines of virt-handler's client (kubevirt-wire.md 1.3).
const (
	ConnectTimeout = 2 * time.Second
	InfoTimeout    = 5 * time.Second
	ShortTimeout   = 5 * time.Second  // S
	LongTimeout    = 20 * time.Second // L
	FreezeTimeout  = 60 * time.Second // X
)

// supportedVersions are the command versions this client speaks.
var supportedVersions = []uint32{1}

// ErrDisconnected marks a call that failed because the launcher went away
// (canceled, connection reset, EOF). Shutdown, Kill and Delete ignore it,
// as virt-handler does: the launcher exiting is their expected outcome.
var ErrDisconnected = errors.New("launcher disconnected")

// Client is a connection to one launcher's command socket.
type Client struct {
	conn    *grpc.ClientConn
	cmd     cmdv1.CmdClient
	Version uint32 // negotiated command version
}

// Dial connects to the command socket at socketPath and negotiates the
// version. The connection is established synchronously within 2 s.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	return DialChecked(ctx, socketPath, nil)
}

// DialChecked is Dial with check run on the socket connection before it is
// used (see unixgrpc.DialChecked): vlctl checks there that the listener is
// the launcher it means.
func DialChecked(ctx context.Context, socketPath string, check func(net.Conn) error) (*Client, error) {
	// Connect now, within the connect limit, instead of at the first call.
	cctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	conn, err := unixgrpc.DialChecked(cctx, socketPath, "", check)
	if err != nil {
		return nil, fmt.Errorf("dial command socket: %w", err)
	}
	c := &Client{conn: conn, cmd: cmdv1.NewCmdClient(conn)}
	if err := c.negotiate(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial command socket %s: %w", socketPath, err)
	}
	return c, nil
}

func (c *Client) negotiate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, InfoTimeout)
	defer cancel()
	info, err := cmdinfo.NewCmdInfoClient(c.conn).Info(ctx, &cmdinfo.CmdInfoRequest{})
	if err != nil {
		return fmt.Errorf("CmdInfo.Info: %w", err)
	}
	versions := slices.Clone(info.GetSupportedCmdVersions())
	slices.Sort(versions)
	slices.Reverse(versions)
	for _, v := range versions {
		if slices.Contains(supportedVersions, v) {
			c.Version = v
			return nil
		}
	}
	return fmt.Errorf("no compatible command version: server offers %v, client supports %v", versions, supportedVersions)
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn exposes the connection for RPCs this client has no method for.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// IsDisconnected reports whether err means the launcher went away.
func IsDisconnected(err error) bool { return errors.Is(err, ErrDisconnected) }

// callError reads a gRPC error the way virt-handler does.
func callError(rpc string, err error) error {
	if err == nil {
		return nil
	}
	st, isStatus := status.FromError(err)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET),
		isStatus && st.Code() == codes.Canceled,
		isStatus && strings.Contains(st.Message(), "connection reset"),
		isStatus && strings.Contains(st.Message(), "EOF"):
		return fmt.Errorf("%s: %w: %v", rpc, ErrDisconnected, err)
	case isStatus && st.Code() == codes.Unimplemented:
		return fmt.Errorf("%s: %w", rpc, err)
	case isStatus:
		return fmt.Errorf("command %s failed with %s: %s", rpc, st.Code(), st.Message())
	}
	return fmt.Errorf("command %s failed: %w", rpc, err)
}

// responseError reads a Response the way virt-handler does: it is a
// failure only if it is present, not successful and has a message.
func responseError(rpc string, r *cmdv1.Response) error {
	if r != nil && !r.Success && r.Message != "" {
		return fmt.Errorf("%s: %s", rpc, r.Message)
	}
	return nil
}

func vmiMessage(vmi *v1.VirtualMachineInstance) (*cmdv1.VMI, error) {
	data, err := json.Marshal(vmi)
	if err != nil {
		return nil, fmt.Errorf("encode vmi: %w", err)
	}
	return &cmdv1.VMI{VmiJson: data}, nil
}

type vmiCall func(context.Context, *cmdv1.VMIRequest, ...grpc.CallOption) (*cmdv1.Response, error)

func (c *Client) vmiRequest(ctx context.Context, rpc string, call vmiCall, vmi *v1.VirtualMachineInstance,
	opts *cmdv1.VirtualMachineOptions, ignoreDisconnect bool) error {
	m, err := vmiMessage(vmi)
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	if opts == nil {
		opts = &cmdv1.VirtualMachineOptions{}
	}
	ctx, cancel := context.WithTimeout(ctx, LongTimeout)
	defer cancel()
	resp, err := call(ctx, &cmdv1.VMIRequest{Vmi: m, Options: opts})
	if err = callError(rpc, err); err != nil {
		if ignoreDisconnect && IsDisconnected(err) {
			return nil
		}
		return err
	}
	return responseError(rpc, resp)
}

// Sync sends SyncVirtualMachine: define, start and converge the domain.
func (c *Client) Sync(ctx context.Context, vmi *v1.VirtualMachineInstance, opts *cmdv1.VirtualMachineOptions) error {
	return c.vmiRequest(ctx, "SyncVirtualMachine", c.cmd.SyncVirtualMachine, vmi, opts, false)
}

// Pause sends PauseVirtualMachine.
func (c *Client) Pause(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "PauseVirtualMachine", c.cmd.PauseVirtualMachine, vmi, nil, false)
}

// Unpause sends UnpauseVirtualMachine.
func (c *Client) Unpause(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "UnpauseVirtualMachine", c.cmd.UnpauseVirtualMachine, vmi, nil, false)
}

// Shutdown sends ShutdownVirtualMachine (ACPI power button).
func (c *Client) Shutdown(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "ShutdownVirtualMachine", c.cmd.ShutdownVirtualMachine, vmi, nil, true)
}

// Kill sends KillVirtualMachine (destroy).
func (c *Client) Kill(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "KillVirtualMachine", c.cmd.KillVirtualMachine, vmi, nil, true)
}

// Delete sends DeleteVirtualMachine (undefine).
func (c *Client) Delete(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "DeleteVirtualMachine", c.cmd.DeleteVirtualMachine, vmi, nil, true)
}

// Reset sends ResetVirtualMachine.
func (c *Client) Reset(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "ResetVirtualMachine", c.cmd.ResetVirtualMachine, vmi, nil, false)
}

// SoftReboot sends SoftRebootVirtualMachine.
func (c *Client) SoftReboot(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "SoftRebootVirtualMachine", c.cmd.SoftRebootVirtualMachine, vmi, nil, false)
}

// Unfreeze sends UnfreezeVirtualMachine.
func (c *Client) Unfreeze(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	return c.vmiRequest(ctx, "UnfreezeVirtualMachine", c.cmd.UnfreezeVirtualMachine, vmi, nil, false)
}

// Freeze sends FreezeVirtualMachine (file-system freeze, 60 s deadline).
func (c *Client) Freeze(ctx context.Context, vmi *v1.VirtualMachineInstance, unfreezeTimeoutSeconds int32) error {
	m, err := vmiMessage(vmi)
	if err != nil {
		return fmt.Errorf("FreezeVirtualMachine: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, FreezeTimeout)
	defer cancel()
	resp, err := c.cmd.FreezeVirtualMachine(ctx, &cmdv1.FreezeRequest{Vmi: m, UnfreezeTimeoutSeconds: unfreezeTimeoutSeconds})
	if err := callError("FreezeVirtualMachine", err); err != nil {
		return err
	}
	return responseError("FreezeVirtualMachine", resp)
}

// Ping checks the launcher answers.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ShortTimeout)
	defer cancel()
	resp, err := c.cmd.Ping(ctx, &cmdv1.EmptyRequest{})
	if err := callError("Ping", err); err != nil {
		return err
	}
	return responseError("Ping", resp)
}

// GetDomain returns the launcher's Domain object; exists is false when the
// launcher has no domain.
func (c *Client) GetDomain(ctx context.Context) (d *domainjson.Domain, exists bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, ShortTimeout)
	defer cancel()
	resp, err := c.cmd.GetDomain(ctx, &cmdv1.EmptyRequest{})
	if err := callError("GetDomain", err); err != nil {
		return nil, false, err
	}
	if err := responseError("GetDomain", resp.GetResponse()); err != nil {
		return nil, false, err
	}
	if resp.GetDomain() == "" {
		return nil, false, nil
	}
	d = &domainjson.Domain{}
	if err := json.Unmarshal([]byte(resp.GetDomain()), d); err != nil {
		return nil, false, fmt.Errorf("GetDomain: decode domain: %w", err)
	}
	return d, true, nil
}

// GetDomainStats returns the domain stats JSON.
func (c *Client) GetDomainStats(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ShortTimeout)
	defer cancel()
	resp, err := c.cmd.GetDomainStats(ctx, &cmdv1.EmptyRequest{})
	if err := callError("GetDomainStats", err); err != nil {
		return "", err
	}
	if err := responseError("GetDomainStats", resp.GetResponse()); err != nil {
		return "", err
	}
	return resp.GetDomainStats(), nil
}

// GetGuestInfo returns what the guest agent reported (KubeVirt's
// VirtualMachineInstanceGuestAgentInfo JSON: OS, host name, time zone,
// users, file systems, interfaces); without an agent its fields are empty.
func (c *Client) GetGuestInfo(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ShortTimeout)
	defer cancel()
	resp, err := c.cmd.GetGuestInfo(ctx, &cmdv1.EmptyRequest{})
	if err := callError("GetGuestInfo", err); err != nil {
		return "", err
	}
	if err := responseError("GetGuestInfo", resp.GetResponse()); err != nil {
		return "", err
	}
	return resp.GetGuestInfoResponse(), nil
}

// GetQemuVersion returns QEMU's version; an empty version is an error.
func (c *Client) GetQemuVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ShortTimeout)
	defer cancel()
	resp, err := c.cmd.GetQemuVersion(ctx, &cmdv1.EmptyRequest{})
	if err := callError("GetQemuVersion", err); err != nil {
		return "", err
	}
	if err := responseError("GetQemuVersion", resp.GetResponse()); err != nil {
		return "", err
	}
	if resp.GetVersion() == "" {
		return "", errors.New("GetQemuVersion: empty version")
	}
	return resp.GetVersion(), nil
}

// Exec runs a command through the guest agent; the deadline is the
// command's timeout plus 5 s, as in virt-probe.
func (c *Client) Exec(ctx context.Context, domainName, command string, args []string, timeoutSeconds int32) (exitCode int32, stdout string, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(timeoutSeconds)*time.Second+5*time.Second)
	defer cancel()
	resp, err := c.cmd.Exec(ctx, &cmdv1.ExecRequest{DomainName: domainName, Command: command, Args: args, TimeoutSeconds: timeoutSeconds})
	if err := callError("Exec", err); err != nil {
		return -1, "", err
	}
	if err := responseError("Exec", resp.GetResponse()); err != nil {
		return -1, "", err
	}
	return resp.GetExitCode(), resp.GetStdOut(), nil
}

// GuestPing pings the guest agent; deadline timeout plus 5 s.
func (c *Client) GuestPing(ctx context.Context, domainName string, timeoutSeconds int32) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(timeoutSeconds)*time.Second+5*time.Second)
	defer cancel()
	resp, err := c.cmd.GuestPing(ctx, &cmdv1.GuestPingRequest{DomainName: domainName, TimeoutSeconds: timeoutSeconds})
	if err := callError("GuestPing", err); err != nil {
		return err
	}
	return responseError("GuestPing", resp.GetResponse())
}

// HandlerSyncOptions are the options a stock virt-handler sends with every
// Sync under KubeVirt's default cluster settings (SMBIOS manufacturer and
// family KubeVirt, product None; balloon stats every 10 s). vlctl and the
// benchmarks send the same, so a launcher sees what a cluster would send.
func HandlerSyncOptions() *cmdv1.VirtualMachineOptions {
	return &cmdv1.VirtualMachineOptions{
		VirtualMachineSMBios:  &cmdv1.SMBios{Manufacturer: "KubeVirt", Family: "KubeVirt", Product: "None"},
		MemBalloonStatsPeriod: 10,
	}
}

// Screenshot sends GetScreenshot and returns the primary display's image
// and its MIME type, as virt-handler's VNC screenshot endpoint asks for it.
func (c *Client) Screenshot(ctx context.Context, vmi *v1.VirtualMachineInstance) (mime string, data []byte, err error) {
	m, err := vmiMessage(vmi)
	if err != nil {
		return "", nil, fmt.Errorf("GetScreenshot: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ShortTimeout)
	defer cancel()
	resp, err := c.cmd.GetScreenshot(ctx, &cmdv1.VMIRequest{Vmi: m, Options: &cmdv1.VirtualMachineOptions{}})
	if err := callError("GetScreenshot", err); err != nil {
		return "", nil, err
	}
	if err := responseError("GetScreenshot", resp.GetResponse()); err != nil {
		return "", nil, err
	}
	return resp.GetMime(), resp.GetData(), nil
}
