// Package premigration is the pre-migration hook server of a migration
// target (KubeVirt's premigration-hook-server, run with
// --libvirt-hook-server-and-client: the LibvirtHooksServerAndClient gate,
// alpha in v1.8, Beta and so on by default in v1.9). When the target's
// libvirt daemon begins an incoming migration it runs its qemu hook
// ("qemu <domain> migrate begin -", the incoming XML on stdin; what the hook
// prints replaces it); the hook client (cmd/libvirt-hook-client) passes the
// XML to this server over a unix socket and prints the answer. The server
// edits it with what only the target knows (hooks.go).
package premigration

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"libvirt.org/go/libvirtxml"
)

// Hook edits the incoming domain.
type Hook func(dom *libvirtxml.Domain) error

// exchangeTimeout bounds one exchange with the hook client (KubeVirt's
// client gives up after 30 s).
const exchangeTimeout = 30 * time.Second

// Server answers one hook call, then stops, as KubeVirt's does: a target
// pod receives one migration.
type Server struct {
	log  *slog.Logger
	done chan struct{}

	mu    sync.Mutex
	hooks []Hook
}

// Serve listens on path and answers one hook call there with hooks, then
// stops; it stops too when ctx ends. A socket left at path is replaced.
func Serve(ctx context.Context, path string, log *slog.Logger, hooks ...Hook) (*Server, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("pre-migration hook server: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("pre-migration hook server: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	s := &Server{log: log, done: make(chan struct{}), hooks: hooks}
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		conn, err := ln.Accept()
		if err != nil {
			return // closed: ctx ended
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(exchangeTimeout))
		if err := Exchange(conn, conn, s.Hooks()...); err != nil {
			// The client sees the connection close with nothing
			// written and fails the hook: libvirt refuses the
			// incoming migration.
			log.Error("pre-migration hook", "reason", err.Error())
			return
		}
		log.Info("pre-migration hook: the incoming domain XML edited")
	}()
	go func() {
		select {
		case <-ctx.Done():
		case <-handled:
		}
		ln.Close()
		<-handled
		close(s.done)
	}()
	log.Info("pre-migration hook server listening", "socket", path)
	return s, nil
}

// SetHooks replaces the hooks the call will run (a later preparation of
// the target, as KubeVirt's server takes the latest converter context).
func (s *Server) SetHooks(hooks ...Hook) {
	s.mu.Lock()
	s.hooks = hooks
	s.mu.Unlock()
}

// Hooks are the hooks the call will run.
func (s *Server) Hooks() []Hook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hooks
}

// Done is closed once the server has stopped and removed its socket.
func (s *Server) Done() <-chan struct{} { return s.done }

// Exchange reads one domain XML from r, runs the hooks on it and writes
// the result to w. Nil hooks are skipped.
func Exchange(r io.Reader, w io.Writer, hooks ...Hook) error {
	var dom libvirtxml.Domain
	if err := xml.NewDecoder(r).Decode(&dom); err != nil {
		return fmt.Errorf("read the domain XML: %w", err)
	}
	for _, h := range hooks {
		if h == nil {
			continue
		}
		if err := h(&dom); err != nil {
			return err
		}
	}
	out, err := dom.Marshal()
	if err != nil {
		return fmt.Errorf("write the domain XML: %w", err)
	}
	if _, err := w.Write([]byte(out)); err != nil {
		return fmt.Errorf("write the domain XML: %w", err)
	}
	return nil
}
