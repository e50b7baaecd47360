// Package migrationproxy plays virt-handler's part in a live migration
// (its migration-proxy package, docs/migration.md §4): in the source pod,
// unix sockets the source's libvirt and QEMU connect to; on the target's
// side, a TCP port per stream that leads to the target pod's socket of the
// same name. Bytes are copied as they are: unix socket ↔ TCP ↔ unix
// socket, as between two nodes. The tests use it, and vlctl can.
package migrationproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// dialTimeout bounds each connection's dial to the far end.
const dialTimeout = 10 * time.Second

// Forwarder accepts connections on a listener and pipes each one to what
// dial connects to, until either side closes.
type Forwarder struct {
	ln   net.Listener
	dial func(context.Context) (net.Conn, error)
	log  *slog.Logger

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Forward starts forwarding ln's connections; Close stops it.
func Forward(ln net.Listener, dial func(context.Context) (net.Conn, error), log *slog.Logger) *Forwarder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Forwarder{ln: ln, dial: dial, log: log, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f
}

// Addr is where the forwarder listens.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.wg.Add(1)
		go f.pipe(c)
	}
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

// pipe copies both ways between in and a new connection to the far end.
func (f *Forwarder) pipe(in net.Conn) {
	defer f.wg.Done()
	if !f.track(in) {
		in.Close()
		return
	}
	defer f.untrack(in)
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	out, err := f.dial(ctx)
	cancel()
	if err != nil {
		f.log.Warn("migration proxy: dial the far end", "listen", f.ln.Addr().String(), "reason", err.Error())
		return
	}
	if !f.track(out) {
		out.Close()
		return
	}
	defer f.untrack(out)
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		io.Copy(dst, src)
		// The other direction may still carry data: close the write
		// side only, as a TCP proxy must.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(out, in)
	go copyHalf(in, out)
	<-done
	<-done
}

// Close stops accepting, ends the connections under way and waits for
// them.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	return err
}

// Stream is one migration stream between two pods, as virt-handler's two
// proxies carry it: in the source pod a unix socket (Source, given to the
// pod's user), on the target's side a TCP port on loopback that leads to
// the target pod's socket (Target), which the target's daemon, QEMU or
// NBD server serves.
type Stream struct {
	Source, Target string
	source, target *Forwarder
}

// Open starts the stream's two ends; the source socket goes to uid:gid,
// mode 0660, as virt-handler chowns it to the pod's user.
func Open(source, target string, uid, gid int, log *slog.Logger) (*Stream, error) {
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("migration proxy for %s: %w", target, err)
	}
	tf := Forward(tln, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", target)
	}, log)
	os.Remove(source) // a stale socket of an earlier try
	sln, err := net.Listen("unix", source)
	if err != nil {
		tf.Close()
		return nil, fmt.Errorf("migration proxy at %s: %w", source, err)
	}
	if err := errors.Join(os.Chown(source, uid, gid), os.Chmod(source, 0o660)); err != nil {
		sln.Close()
		tf.Close()
		return nil, fmt.Errorf("migration proxy at %s: %w", source, err)
	}
	addr := tln.Addr().String()
	sf := Forward(sln, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}, log)
	return &Stream{Source: source, Target: target, source: sf, target: tf}, nil
}

// Close ends both ends and removes the source socket.
func (s *Stream) Close() error {
	err := errors.Join(s.source.Close(), s.target.Close())
	if rerr := os.Remove(s.Source); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}
