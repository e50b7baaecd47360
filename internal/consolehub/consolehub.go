// Package consolehub shares a guest's serial console between vlctl run
// and the `vlctl console` commands attached to its socket.
package consolehub

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/relay"
)

// Hub shares the guest's serial console, which QEMU serves to one
// client at a time: vlctl run holds that connection, shows the output on
// its own console, and fans it out to every `vlctl console` attached to
// the hub's socket. Input comes from one of them at a time (the first;
// when it detaches, the longest attached of the rest); the others only
// watch and are told so.
type Hub struct {
	guest net.Conn
	out   io.Writer
	// status hears of consoles refused and accept errors.
	status io.Writer
	lis    net.Listener
	path   string

	mu      sync.Mutex
	clients []*hubClient // in order of attaching; clients[0] has the input
	closed  bool
	quit    chan struct{} // closed by close
	wg      sync.WaitGroup
}

// hubClient is one attached console: a `vlctl console` connection, or
// vlctl run's own terminal (conn nil: it already shows the output).
type hubClient struct{ conn net.Conn }

func (c *hubClient) notify(msg string) {
	if c.conn != nil {
		c.conn.SetWriteDeadline(time.Now().Add(hubWriteTimeout))
		fmt.Fprint(c.conn, msg)
	}
}

// hubWriteTimeout bounds a write to one attached console: a client that
// does not read is dropped rather than stalling the guest's output.
const hubWriteTimeout = 2 * time.Second

// New listens at path, a socket only root may connect to (it is
// in the work dir, which the launcher's user cannot write, and mode 0600).
func New(guest net.Conn, out, status io.Writer, path string) (*Hub, error) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("console socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("console socket: %w", err)
	}
	h := &Hub{guest: guest, out: out, status: status, lis: lis, path: path, quit: make(chan struct{})}
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

func (h *Hub) statusf(format string, a ...any) { fmt.Fprintf(h.status, format, a...) }

// Run copies the guest's output to out and to every client until the
// guest's connection ends.
func (h *Hub) Run() {
	buf := make([]byte, 32<<10)
	for {
		n, err := h.guest.Read(buf)
		if n > 0 {
			h.out.Write(buf[:n])
			h.broadcast(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (h *Hub) broadcast(b []byte) {
	h.mu.Lock()
	clients := append([]*hubClient(nil), h.clients...)
	h.mu.Unlock()
	for _, c := range clients {
		if c.conn == nil {
			continue
		}
		c.conn.SetWriteDeadline(time.Now().Add(hubWriteTimeout))
		if _, err := c.conn.Write(b); err != nil {
			c.conn.Close() // its reader removes it
		}
	}
}

// attach adds a client; an error when the hub is closed or has
// maxConsoles attached.
func (h *Hub) attach(c *hubClient) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errors.New("the console is closed")
	}
	if len(h.clients) >= maxConsoles {
		h.mu.Unlock()
		return fmt.Errorf("a console not attached: %d are, the most allowed", maxConsoles)
	}
	h.clients = append(h.clients, c)
	watcher := len(h.clients) > 1
	h.mu.Unlock()
	if watcher {
		c.notify("\r\nvlctl: another console has the input; this one shows the output until it detaches\r\n")
	}
	return nil
}

// AttachKeys makes keys (vlctl run's terminal, read by one goroutine for
// the whole run: see Run) a client whose output is out already; the end of
// keys (^]) detaches it. Closing the hub stops it without taking a key, so
// a guest started again by the run strategy gets every key.
func (h *Hub) AttachKeys(keys <-chan []byte) {
	c := &hubClient{}
	if h.attach(c) != nil {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer h.remove(c)
		for {
			select {
			case b, ok := <-keys:
				if !ok {
					return
				}
				if h.hasInput(c) {
					if _, err := h.guest.Write(b); err != nil {
						return
					}
				}
			case <-h.quit:
				return
			}
		}
	}()
}

// maxConsoles bounds the consoles attached at once: only root reaches the
// hub's socket, but each attached console costs a descriptor and a copy
// of every byte the guest prints. An attached console has no idle limit:
// watching a quiet guest is what one is for.
const maxConsoles = 16

// accept attaches every console that connects, until the hub is closed;
// it outlives transient errors (a vlctl out of descriptors).
func (h *Hub) accept() {
	defer h.wg.Done()
	var rep relay.Reporter
	relay.AcceptLoop(h.lis, func(err error) {
		rep.Printf(h.statusf, "vlctl: console socket: %v\n", err)
	}, func(conn net.Conn) {
		c := &hubClient{conn: conn}
		if err := h.attach(c); err != nil {
			rep.Printf(h.statusf, "vlctl: console socket: %v\n", err)
			c.notify("\r\nvlctl: " + err.Error() + "\r\n")
			conn.Close()
			return
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.forward(c, conn)
		}()
	})
}

// forward sends what c types (in) to the guest while c has the input, and
// removes c when its input ends.
func (h *Hub) forward(c *hubClient, in io.Reader) {
	defer h.remove(c)
	buf := make([]byte, 4096)
	for {
		n, err := in.Read(buf)
		if n > 0 && h.hasInput(c) {
			if _, werr := h.guest.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (h *Hub) hasInput(c *hubClient) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients) > 0 && h.clients[0] == c
}

func (h *Hub) remove(c *hubClient) {
	if c.conn != nil {
		c.conn.Close()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, x := range h.clients {
		if x == c {
			h.clients = append(h.clients[:i], h.clients[i+1:]...)
			if i == 0 && len(h.clients) > 0 {
				h.clients[0].notify("\r\nvlctl: this console has the input now\r\n")
			}
			return
		}
	}
}

// Close detaches every client, stops listening, removes the socket and
// waits for the hub's goroutines.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	close(h.quit)
	h.lis.Close()
	for _, c := range h.clients {
		if c.conn != nil {
			c.conn.Close()
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
	os.Remove(h.path)
}
