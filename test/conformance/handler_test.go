package conformance

// The virt-handler side: a notify server on the pod's
// domain-notify-pipe.sock and a raw gRPC connection to launcher-sock.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// event is one domain event as the handler receives it.
type event struct {
	Type   string
	JSON   []byte
	Domain *kvshape.Domain // nil when it did not decode
	Err    error           // strict decoding error
}

func (e event) String() string {
	if e.Domain == nil {
		return e.Type + " <undecodable>"
	}
	return fmt.Sprintf("%s %s/%s", e.Type, e.Domain.Status.Status, e.Domain.Status.Reason)
}

// notifyServer plays the handler's end of the notify pipe
// (kubevirt-wire.md 2.2): the launcher test harness's notify server
// (launchertest.Pod.Notify: NotifyInfo.Info offers [1]) with KubeVirt's
// Domain type as its strict check, so a domainJSON that does not decode
// into KubeVirt's shape is answered success=false with a message, as the
// handler does.
type notifyServer struct{ *notifytest.Server }

func startNotify(t *testing.T, p *pod) *notifyServer {
	t.Helper()
	return &notifyServer{p.Notify(notifytest.Options{Check: func(b []byte) error {
		_, err := kvshape.Decode(b)
		return err
	}})}
}

func (s *notifyServer) infoCalls() int { return s.InfoCalls() }

// k8sEvents are the K8s events received, as sent.
func (s *notifyServer) k8sEvents() []string {
	var out []string
	for _, e := range s.Events() {
		if e.K8s != nil {
			out = append(out, string(e.K8sJSON))
		}
	}
	return out
}

// snapshot lists the domain events received (K8s events left out: the
// indices of wait and event count domain events only), each decoded into
// KubeVirt's shape, and a channel closed at the next event.
func (s *notifyServer) snapshot() ([]event, <-chan struct{}) {
	all, changed := s.Snapshot()
	var evs []event
	for _, e := range all {
		if e.K8s != nil {
			continue
		}
		ev := event{Type: e.EventType, JSON: e.DomainJSON, Err: e.Err}
		if ev.Err == nil {
			ev.Domain, ev.Err = kvshape.Decode(e.DomainJSON)
		}
		if ev.Err != nil {
			ev.Domain = nil
		}
		evs = append(evs, ev)
	}
	return evs, changed
}

// wait returns the index of the first event at or after from that
// decodes and satisfies ok.
func (s *notifyServer) wait(t *testing.T, from int, what string, timeout time.Duration, ok func(*kvshape.Domain) bool) int {
	t.Helper()
	deadline := time.After(timeout)
	for {
		evs, changed := s.snapshot()
		for i := from; i < len(evs); i++ {
			if evs[i].Domain != nil && ok(evs[i].Domain) {
				return i
			}
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no event %s within %v; events: %v", what, timeout, evs)
		}
	}
}

func (s *notifyServer) event(i int) event {
	evs, _ := s.snapshot()
	return evs[i]
}

// handler is the command side: a raw gRPC connection as virt-handler makes
// it (unix socket, cleartext, :authority localhost).
type handler struct {
	conn *grpc.ClientConn
	info cmdinfo.CmdInfoClient
	cmd  cmdv1.CmdClient
}

func dialLauncher(t *testing.T, sock string) *handler {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}))
	launchertest.Must(t, err)
	t.Cleanup(func() { conn.Close() })
	return &handler{conn: conn, info: cmdinfo.NewCmdInfoClient(conn), cmd: cmdv1.NewCmdClient(conn)}
}

// Deadlines of the handler's client (kubevirt-wire.md 1.3).
const (
	shortDeadline = 5 * time.Second
	longDeadline  = 20 * time.Second
)

func vmiRequest(vmiJSON []byte) *cmdv1.VMIRequest {
	return &cmdv1.VMIRequest{Vmi: &cmdv1.VMI{VmiJson: vmiJSON}, Options: &cmdv1.VirtualMachineOptions{}}
}

// failure reads a reply the way the handler does (kubevirt-wire.md 1.5)
// and also enforces the launcher's side of the convention: success=false
// always carries a message. It returns nil when the handler would count
// the call as a success.
func failure(t *testing.T, rpc string, r *cmdv1.Response, err error) error {
	t.Helper()
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	if r == nil {
		t.Errorf("%s: reply without a Response (the handler would count it a success)", rpc)
		return nil
	}
	if !r.Success && r.Message == "" {
		t.Errorf("%s: success=false with an empty message (the handler would count it a success)", rpc)
		return nil
	}
	if !r.Success {
		return fmt.Errorf("%s: %s", rpc, r.Message)
	}
	return nil
}

// disconnected: errors the handler ignores on Shutdown, Kill and Delete,
// as the launcher may be gone before it answers.
func disconnected(err error) bool {
	if err == nil {
		return false
	}
	c := status.Code(err)
	return c == codes.Canceled || c == codes.Unavailable || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "connection reset")
}

// ping is the handler's Ping with its 5 s deadline.
func (h *handler) ping(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	r, err := h.cmd.Ping(ctx, &cmdv1.EmptyRequest{})
	return failure(t, "Ping", r, err)
}

// getDomain is the handler's GetDomain with its 5 s deadline; "" means no
// domain.
func (h *handler) getDomain(t *testing.T) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	r, err := h.cmd.GetDomain(ctx, &cmdv1.EmptyRequest{})
	if err != nil {
		return "", fmt.Errorf("GetDomain: %w", err)
	}
	if err := failure(t, "GetDomain", r.Response, nil); err != nil {
		return "", err
	}
	return r.Domain, nil
}

// vmiCall sends one VMIRequest RPC with the 20 s deadline.
func (h *handler) vmiCall(t *testing.T, rpc string, call func(context.Context, *cmdv1.VMIRequest, ...grpc.CallOption) (*cmdv1.Response, error), vmiJSON []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), longDeadline)
	defer cancel()
	r, err := call(ctx, vmiRequest(vmiJSON))
	return failure(t, rpc, r, err)
}

// peerPID reads SO_PEERCRED of launcher-sock, as the handler does to find
// "the launcher" whose namespaces it works in.
func peerPID(t *testing.T, sock string) int {
	t.Helper()
	c, err := net.Dial("unix", sock)
	launchertest.Must(t, err)
	defer c.Close()
	pid, err := unixgrpc.PeerPID(c)
	launchertest.Must(t, err)
	return pid
}

// handlerVMI is the VMI JSON the handler sends: the full object with
// apiVersion and kind left empty.
func handlerVMI(t *testing.T, p *pod, kernelArgs ...string) []byte {
	t.Helper()
	v, err := loadVMI(p.VMIYAML(p.Name, kernelArgs...))
	launchertest.Must(t, err)
	v.APIVersion, v.Kind = "", ""
	b, err := json.Marshal(v)
	launchertest.Must(t, err)
	return b
}
