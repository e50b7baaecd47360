// Package notifytest is a stand-in for virt-handler's notify server
// (kubevirt.notify.info NotifyInfo + kubevirt.notify.v1 Notify on a unix
// socket). It decodes what it receives the way the handler does and records
// it, for tests of the launcher's notify client and conformance tests.
package notifytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	notifyv1 "github.com/virtlauncher/virtlauncher/api/notify/v1"
	"github.com/virtlauncher/virtlauncher/api/notifyinfo"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// Event is one received event: either a domain event or a K8s event.
type Event struct {
	// Domain events.
	EventType  string
	DomainJSON []byte
	Domain     *domainjson.Domain
	// K8s events.
	K8s *corev1.Event
}

// Server records events. Its zero value is not usable; use Start.
type Server struct {
	gs  *grpc.Server
	lis net.Listener

	mu      sync.Mutex
	events  []Event
	changed chan struct{}
	reject  string
	// versions is what NotifyInfo.Info offers (default [1]).
	versions []uint32
}

// Start serves on a unix socket at path (replacing a stale file).
func Start(path string) (*Server, error) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("notifytest: listen on %s: %w", path, err)
	}
	s := &Server{versions: []uint32{1}, gs: grpc.NewServer(), lis: lis, changed: make(chan struct{})}
	notifyinfo.RegisterNotifyInfoServer(s.gs, infoServer{s: s})
	notifyv1.RegisterNotifyServer(s.gs, notifyServer{s: s})
	go s.gs.Serve(lis) //nolint:errcheck // ends with Stop
	return s, nil
}

// Stop closes the server and removes the socket, as the handler does when
// it drops the VMI.
func (s *Server) Stop() {
	s.gs.Stop()
	_ = os.Remove(s.lis.Addr().String())
}

// SetVersions sets what NotifyInfo.Info offers.
func (s *Server) SetVersions(v ...uint32) {
	s.mu.Lock()
	s.versions = v
	s.mu.Unlock()
}

// Reject makes the server answer success=false with msg (empty: accept).
func (s *Server) Reject(msg string) {
	s.mu.Lock()
	s.reject = msg
	s.mu.Unlock()
}

// Events returns a copy of the events received so far.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// WaitFor waits until at least n events were received.
func (s *Server) WaitFor(ctx context.Context, n int) ([]Event, error) {
	for {
		s.mu.Lock()
		if len(s.events) >= n {
			ev := append([]Event(nil), s.events...)
			s.mu.Unlock()
			return ev, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return s.Events(), fmt.Errorf("notifytest: waiting for %d events, have %d: %w", n, len(s.Events()), ctx.Err())
		}
	}
}

func (s *Server) record(e Event) *notifyv1.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reject != "" {
		return &notifyv1.Response{Success: false, Message: s.reject}
	}
	s.events = append(s.events, e)
	close(s.changed)
	s.changed = make(chan struct{})
	return &notifyv1.Response{Success: true}
}

type infoServer struct {
	s *Server
	notifyinfo.UnimplementedNotifyInfoServer
}

func (i infoServer) Info(context.Context, *notifyinfo.NotifyInfoRequest) (*notifyinfo.NotifyInfoResponse, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	return &notifyinfo.NotifyInfoResponse{SupportedNotifyVersions: i.s.versions}, nil
}

type notifyServer struct {
	s *Server
	notifyv1.UnimplementedNotifyServer
}

// HandleDomainEvent decodes case-sensitively, as virt-handler does; a
// domain that does not decode is answered with success=false.
func (n notifyServer) HandleDomainEvent(_ context.Context, req *notifyv1.DomainEventRequest) (*notifyv1.Response, error) {
	e := Event{EventType: req.EventType, DomainJSON: req.DomainJSON}
	switch req.EventType {
	case "ADDED", "MODIFIED", "DELETED":
		d := &domainjson.Domain{}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.DomainJSON, d); err != nil {
			return &notifyv1.Response{Success: false, Message: "decode domain: " + err.Error()}, nil
		}
		e.Domain = d
	}
	return n.s.record(e), nil
}

// HandleK8sEvent requires the VMI identity the handler looks up.
func (n notifyServer) HandleK8SEvent(_ context.Context, req *notifyv1.K8SEventRequest) (*notifyv1.Response, error) {
	ev := &corev1.Event{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.EventJSON, ev); err != nil {
		return &notifyv1.Response{Success: false, Message: "decode event: " + err.Error()}, nil
	}
	o := ev.InvolvedObject
	if o.Name == "" || o.Namespace == "" || o.UID == "" {
		return &notifyv1.Response{Success: false, Message: "event names no VMI"}, nil
	}
	return n.s.record(Event{K8s: ev}), nil
}
