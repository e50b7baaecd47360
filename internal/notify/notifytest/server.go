// Package notifytest is a stand-in for virt-handler's notify server
// (kubevirt.notify.info NotifyInfo + kubevirt.notify.v1 Notify on a unix
// socket). It decodes what it receives the way the handler does and records
// it, for tests of the launcher's notify client and conformance tests.
package notifytest

import (
	"context"
	"errors"
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
	Domain     *domainjson.Domain // nil when it did not decode
	// Err says why the domain did not decode, or why Options.Check
	// refused it; the event was answered success=false.
	Err error
	// K8s events, decoded and as sent.
	K8s     *corev1.Event
	K8sJSON []byte
}

// Options change what the server checks.
type Options struct {
	// Check, if set, is one more decoding of every domain event's JSON
	// (KubeVirt's own types, for a strict conformance check); an event it
	// refuses is answered success=false, as one that does not decode.
	Check func(domainJSON []byte) error
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
	infos    int // NotifyInfo.Info calls
	opts     Options
}

// Start serves on a unix socket at path (replacing a stale file).
func Start(path string) (*Server, error) { return StartWith(path, Options{}) }

// StartWith is Start with options.
func StartWith(path string, o Options) (*Server, error) {
	_ = os.Remove(path)
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("notifytest: listen on %s: %w", path, err)
	}
	s := &Server{versions: []uint32{1}, gs: grpc.NewServer(), lis: lis, changed: make(chan struct{}), opts: o}
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

// InfoCalls is how many NotifyInfo.Info calls the server answered.
func (s *Server) InfoCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.infos
}

// Events returns a copy of the events received so far, those answered
// success=false included (Event.Err), those refused by Reject not.
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

// Snapshot is Events and a channel closed at the next event, taken
// together: a caller waits on it for an event that matches what it looks
// for without missing one in between.
func (s *Server) Snapshot() ([]Event, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...), s.changed
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
	if e.Err != nil {
		return &notifyv1.Response{Success: false, Message: e.Err.Error()}
	}
	return &notifyv1.Response{Success: true}
}

type infoServer struct {
	s *Server
	notifyinfo.UnimplementedNotifyInfoServer
}

func (i infoServer) Info(context.Context, *notifyinfo.NotifyInfoRequest) (*notifyinfo.NotifyInfoResponse, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	i.s.infos++
	return &notifyinfo.NotifyInfoResponse{SupportedNotifyVersions: i.s.versions}, nil
}

type notifyServer struct {
	s *Server
	notifyv1.UnimplementedNotifyServer
}

// HandleDomainEvent decodes case-sensitively, as virt-handler does; a
// domain that does not decode, or that Options.Check refuses, is recorded
// with its error and answered with success=false.
func (n notifyServer) HandleDomainEvent(_ context.Context, req *notifyv1.DomainEventRequest) (*notifyv1.Response, error) {
	e := Event{EventType: req.EventType, DomainJSON: append([]byte(nil), req.DomainJSON...)}
	switch req.EventType {
	case "ADDED", "MODIFIED", "DELETED":
		d := &domainjson.Domain{}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(req.DomainJSON, d); err != nil {
			e.Err = fmt.Errorf("decode domain: %w", err)
			break
		}
		if n.s.opts.Check != nil {
			if err := n.s.opts.Check(req.DomainJSON); err != nil {
				e.Err = fmt.Errorf("check domain: %w", err)
				break
			}
		}
		e.Domain = d
	}
	return n.s.record(e), nil
}

// HandleK8sEvent requires the VMI identity the handler looks up.
func (n notifyServer) HandleK8SEvent(_ context.Context, req *notifyv1.K8SEventRequest) (*notifyv1.Response, error) {
	e := Event{K8s: &corev1.Event{}, K8sJSON: append([]byte(nil), req.EventJSON...)}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.EventJSON, e.K8s); err != nil {
		e.Err = fmt.Errorf("decode event: %w", err)
	} else if o := e.K8s.InvolvedObject; o.Name == "" || o.Namespace == "" || o.UID == "" {
		e.Err = errors.New("event names no VMI")
	}
	return n.s.record(e), nil
}
