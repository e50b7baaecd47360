// Package migrationproxy plays virt-handler's part in a live migration
// (its migration-proxy package, docs/migration.md §4): in the source pod,
// unix sockets the source's libvirt and QEMU connect to; on the target's
// side, a TCP port per stream that leads to the target pod's socket of the
// same name. Bytes are copied as they are: unix socket ↔ TCP ↔ unix
// socket, as between two nodes. The tests use it, and vlctl can.
package migrationproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/relay"
)

// dialTimeout bounds each connection's dial to the far end.
const dialTimeout = 10 * time.Second

// Stream is one migration stream between two pods, as virt-handler's two
// proxies carry it: in the source pod a unix socket (Source, given to the
// pod's user), on the target's side a TCP port on loopback that leads to
// the target pod's socket (Target), which the target's daemon, QEMU or
// NBD server serves.
type Stream struct {
	Source, Target string
	relay          *relay.Relay
	conns          atomic.Int64
	remove         func() error
}

// Open starts the stream's two ends; the source socket goes to uid:gid,
// mode 0660, as virt-handler chowns it to the pod's user.
func Open(source, target string, uid, gid int, log *slog.Logger) (*Stream, error) {
	os.Remove(source) // a stale socket of an earlier try
	sln, err := net.Listen("unix", source)
	if err != nil {
		return nil, fmt.Errorf("migration proxy at %s: %w", source, err)
	}
	if err := errors.Join(os.Chown(source, uid, gid), os.Chmod(source, 0o660)); err != nil {
		sln.Close()
		return nil, fmt.Errorf("migration proxy at %s: %w", source, err)
	}
	dial := func() (net.Conn, error) { return net.DialTimeout("unix", target, dialTimeout) }
	remove := func() error { return os.Remove(source) }
	return Serve(sln, source, target, dial, remove, log)
}

// Serve is Open for a source socket the caller made (sln, at source), a
// far end it dials itself (dial: e.g. one that checks who serves the
// target socket) and removes itself (remove, at Close).
func Serve(sln net.Listener, source, target string, dial func() (net.Conn, error), remove func() error, log *slog.Logger) (*Stream, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rl := relay.New(func(what string, err error) {
		log.Warn("migration proxy: dial the far end", "stream", what, "reason", err.Error())
	})
	// The TCP hop in the middle is what virt-handler's two proxies
	// have between nodes; here it is on loopback.
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sln.Close()
		remove()
		return nil, fmt.Errorf("migration proxy for %s: %w", target, err)
	}
	st := &Stream{Source: source, Target: target, relay: rl, remove: remove}
	rl.Serve(tln, target, func(net.Conn) (net.Conn, error) { return dial() })
	addr := tln.Addr().String()
	rl.Serve(sln, source, func(net.Conn) (net.Conn, error) {
		st.conns.Add(1)
		return net.DialTimeout("tcp", addr, dialTimeout)
	})
	return st, nil
}

// Connections is how many connections the source socket has taken: the
// libvirt connection is one per migration, the memory stream one, or one
// more per channel for a parallel migration.
func (s *Stream) Connections() int64 { return s.conns.Load() }

// Close ends both ends and removes the source socket.
func (s *Stream) Close() error {
	s.relay.Close()
	if err := s.remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
