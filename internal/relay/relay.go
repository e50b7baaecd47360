// Package relay copies connections both ways: for each connection a
// listener accepts, it dials the other end and copies bytes in both
// directions until both are done, carrying a half-close across. vlctl
// run's published ports and guest egress use it, and the migration proxy
// that plays virt-handler's part in tests.
package relay

import (
	"io"
	"net"
	"sync"
)

// Relay serves listeners and ends every relayed connection when closed.
type Relay struct {
	onError func(what string, err error)

	mu     sync.Mutex
	lis    []net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New makes a relay; onError (nil: none) hears of each connection whose
// other end could not be dialled, named by what Serve was given.
func New(onError func(what string, err error)) *Relay {
	if onError == nil {
		onError = func(string, error) {}
	}
	return &Relay{onError: onError, conns: map[net.Conn]struct{}{}}
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
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.relay(c, what, dial)
			}()
		}
	}()
}

// relay dials the other end for c and copies both ways until both sides
// are done.
func (r *Relay) relay(c net.Conn, what string, dial func(net.Conn) (net.Conn, error)) {
	defer c.Close()
	if !r.track(c) {
		return
	}
	defer r.untrack(c)
	g, err := dial(c)
	if err != nil {
		r.onError(what, err)
		return
	}
	defer g.Close()
	if !r.track(g) {
		return
	}
	defer r.untrack(g)
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		io.Copy(dst, src)
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

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
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
