// Package cmdserver serves KubeVirt's command protocol (kubevirt.cmd.info
// CmdInfo and kubevirt.cmd.v1 Cmd, kubevirt-wire.md section 1) on a unix
// socket and drives a Manager.
//
// Conventions kept from KubeVirt's launcher: business failures are
// Response{success:false, message:"..."} with a nil gRPC error, and the
// message is never empty (virt-handler reads success=false with an empty
// message as success). RPCs virtlauncher does not implement answer the same
// way with "<RPC> is not supported by virtlauncher". The server adds no lock
// of its own: gRPC runs each call on its own goroutine, so Ping and GetDomain
// never wait behind a long Sync; ordering domain operations is the
// Manager's job.
package cmdserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	"github.com/virtlauncher/virtlauncher/internal/agent"
)

// SupportedCmdVersions is what CmdInfo.Info answers: virt-handler speaks
// only version 1.
var SupportedCmdVersions = []uint32{1}

// MaxMessageSize bounds a received message; larger ones are rejected with
// ResourceExhausted before they reach a handler. It is gRPC's default and
// virt-handler's own limit.
const MaxMessageSize = 4 << 20

// MaxVMICalls bounds the calls carrying a VMI (Sync, Pause, Kill, ...)
// in flight at once; one more is refused at once with ResourceExhausted,
// before its message is read. Each holds its decoded VMI while it waits
// for the domain's operation lock: 24 concurrent 4 MiB Syncs took a
// launcher from 0.1 to 1.8 GB before this bound. Only one of them reads
// and decodes its message at a time (admit.go). virt-handler sends one
// such call at a time for a VMI, rarely two.
const MaxVMICalls = 4

// stopGrace is how long Serve waits for running calls after its context
// ends before it closes their connections.
const stopGrace = 5 * time.Second

// Server is the command server.
type Server struct {
	m   Manager
	log *slog.Logger
	gs  *grpc.Server
	// skipSyncValidation: Sync hands the VMI to the Manager unchecked.
	skipSyncValidation bool
	// podName is the launcher's pod (POD_NAME); empty when unknown.
	podName string
	// agent answers the guest-agent RPCs.
	agent GuestAgent
	// vmStats: GetVMStats answers (virt-launcher's --vm-stats-collector).
	vmStats bool
	// vmiCalls holds a token per VMI-carrying call in flight; decodeSlot
	// the one such call reading and decoding its message (admit.go).
	vmiCalls, decodeSlot chan struct{}
	// arrival bounds the reading of such a message (messageArrival).
	arrival time.Duration
}

// Option changes how a Server behaves.
type Option func(*Server)

// WithoutSyncValidation makes Sync pass the decoded VMI to the Manager
// without ValidateSyncVMI. Only for tests whose fake Manager is fed
// skeleton VMIs; a launcher always validates.
func WithoutSyncValidation() Option { return func(s *Server) { s.skipSyncValidation = true } }

// WithPodName names the launcher's pod (KubeVirt's POD_NAME), which
// SignalTargetPodCleanup compares with the VMI's migration target pod.
func WithPodName(name string) Option { return func(s *Server) { s.podName = name } }

// New makes a server driving m. It registers both services on one gRPC
// server, as virt-handler expects them on one socket.
func New(m Manager, log *slog.Logger, opts ...Option) *Server {
	s := &Server{m: m, log: log, agent: agent.NewStore(),
		vmiCalls: make(chan struct{}, MaxVMICalls), decodeSlot: make(chan struct{}, 1), arrival: messageArrival}
	for _, o := range opts {
		o(s)
	}
	s.gs = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		grpc.ChainUnaryInterceptor(s.recoverPanic),
	)
	cmdinfo.RegisterCmdInfoServer(s.gs, infoServer{})
	s.gs.RegisterService(s.admitVMICalls(&cmdv1.Cmd_ServiceDesc, cmdv1.File_cmd_v1_cmd_proto.Services().ByName("Cmd")), &cmdServer{s: s})
	return s
}

// Serve answers calls on lis until ctx ends or lis fails. When ctx ends it
// lets running calls finish for a few seconds, then closes the connections;
// it returns nil in that case.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		stopped := make(chan struct{})
		go func() { s.gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(stopGrace):
			s.gs.Stop()
		}
	}()
	err := s.gs.Serve(lis)
	if ctx.Err() != nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve command socket: %w", err)
	}
	return nil
}

// recoverPanic turns a panic in a handler (or in the Manager) into an
// Internal error for that call instead of ending the launcher.
func (s *Server) recoverPanic(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in command handler", "method", info.FullMethod, "reason", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "%s panicked: %v", info.FullMethod, r)
		}
	}()
	return h(ctx, req)
}

type infoServer struct {
	cmdinfo.UnimplementedCmdInfoServer
}

func (infoServer) Info(context.Context, *cmdinfo.CmdInfoRequest) (*cmdinfo.CmdInfoResponse, error) {
	return &cmdinfo.CmdInfoResponse{SupportedCmdVersions: SupportedCmdVersions}, nil
}
