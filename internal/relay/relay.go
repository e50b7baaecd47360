// Package relay copies connections both ways: for each connection a
// listener accepts, it dials the other end and copies bytes in both
// directions until both are done, carrying a half-close across. vlctl
// run's published ports and guest egress use it, and the migration proxy
// that plays virt-handler's part in tests. It is also the one home of the
// accept loop every server socket of vlctl run uses (AcceptLoop), which
// outlives transient errors, and of the rate limit on what a peer can make
// such a server say (Reporter).
package relay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what the connections of one relay may hold. The zero value
// bounds nothing.
type Limits struct {
	// MaxConns is how many connections the relay carries at once, over
	// all the listeners it serves; one accepted beyond it is closed at
	// once, with a report. 0: no limit.
	MaxConns int
	// Idle closes a relayed connection when no byte went either way
	// for this long (and a write the far side does not take for as
	// long). 0: never.
	Idle time.Duration
}

// Relay serves listeners and ends every relayed connection when closed.
type Relay struct {
	lim Limits
	// report hears of failed dials, overLimit of connections over
	// lim.MaxConns, acceptErr of accept errors; each rate-limited.
	report, overLimit, acceptErr func(what string, err error)
	active                       atomic.Int64 // connections being relayed

	mu     sync.Mutex
	lis    []net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	// epoch counts EndConns: a connection accepted before one is not
	// relayed after it, even when its dial was under way.
	epoch int
	wg    sync.WaitGroup
}

// New makes a relay without limits; onError (nil: none) hears of each
// connection whose other end could not be dialled and of accept errors,
// named by what Serve was given.
func New(onError func(what string, err error)) *Relay {
	return NewLimited(Limits{}, onError)
}

// NewLimited makes a relay bounded by lim. onError hears, besides what
// New's does, of each connection closed for being over lim.MaxConns; the
// peers decide how often any of that happens, so it hears, of each of
// the three kinds, as much as a Reporter lets through, and how many
// reports it did not hear.
func NewLimited(lim Limits, onError func(what string, err error)) *Relay {
	if onError == nil {
		onError = func(string, error) {}
	}
	// Each kind of report has a budget of its own: connections over the
	// limit do not silence the refused ones.
	reporter := func() func(string, error) {
		rep := &Reporter{}
		return func(what string, err error) {
			if n, ok := rep.Allow(); ok {
				if n > 0 {
					err = fmt.Errorf("%w (and %d more reports left out)", err, n)
				}
				onError(what, err)
			}
		}
	}
	return &Relay{lim: lim, report: reporter(), overLimit: reporter(), acceptErr: reporter(), conns: map[net.Conn]struct{}{}}
}

// Serve relays every connection l accepts, until l or the relay is closed.
// dial makes the other end for an accepted connection, with a deadline of
// its own; the client of a failed dial sees its connection closed.
func (r *Relay) Serve(l net.Listener, what string, dial func(net.Conn) (net.Conn, error)) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		l.Close()
		return
	}
	r.lis = append(r.lis, l)
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		AcceptLoop(l, func(err error) { r.acceptErr(what, err) }, func(c net.Conn) {
			if n := r.active.Add(1); r.lim.MaxConns > 0 && n > int64(r.lim.MaxConns) {
				r.active.Add(-1)
				c.Close()
				r.overLimit(what, fmt.Errorf("a connection from %s closed at once: %d connections are relayed already, the most allowed", c.RemoteAddr(), r.lim.MaxConns))
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer r.active.Add(-1)
				r.relay(c, what, dial)
			}()
		})
	}()
}

// relay dials the other end for c and copies both ways until both sides
// are done.
func (r *Relay) relay(c net.Conn, what string, dial func(net.Conn) (net.Conn, error)) {
	defer c.Close()
	epoch, ok := r.track(c, -1)
	if !ok {
		return
	}
	defer r.untrack(c)
	g, err := dial(c)
	if err != nil {
		r.report(what, err)
		return
	}
	defer g.Close()
	if _, ok := r.track(g, epoch); !ok {
		return
	}
	defer r.untrack(g)
	var last atomic.Int64 // when a byte last went either way
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		copyIdle(dst, src, r.lim.Idle, &last)
		// The other direction may still carry data: close the write
		// side only.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(g, c)
	go half(c, g)
	<-done
	<-done
}

// copyIdle copies src to dst until src ends or fails, or until nothing
// went either way (last, shared by both directions) for idle; 0: no idle
// limit.
func copyIdle(dst, src net.Conn, idle time.Duration, last *atomic.Int64) {
	if idle == 0 {
		// io.Copy splices TCP to TCP in the kernel: the migration
		// proxy's memory stream goes through here.
		io.Copy(dst, src)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			dst.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// Only this direction was quiet: the other one carried
			// bytes within idle, so the connection is in use.
			if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			return
		}
	}
}

// track adds c to the connections Close and EndConns end, unless the
// relay is closed or, with epoch not -1, EndConns ran since that epoch;
// it returns the current epoch.
func (r *Relay) track(c net.Conn, epoch int) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || (epoch >= 0 && epoch != r.epoch) {
		return r.epoch, false
	}
	r.conns[c] = struct{}{}
	return r.epoch, true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
}

// EndConns ends every relayed connection, and those whose other end is
// being dialled, and goes on listening: the far end they reach is gone.
func (r *Relay) EndConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.epoch++
	for c := range r.conns {
		c.Close()
	}
}

// Close stops listening, ends every relayed connection and waits for the
// relays to return.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	for _, l := range r.lis {
		l.Close()
	}
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
