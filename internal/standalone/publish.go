package standalone

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// Publish is one --publish: a TCP port on the host forwarded to a port of
// the guest, as `podman run -p` does.
type Publish struct {
	Host      netip.AddrPort // where vlctl listens, loopback unless named
	GuestPort uint16
}

func (p Publish) String() string {
	return fmt.Sprintf("%s -> guest port %d/tcp", p.Host, p.GuestPort)
}

// ParsePublish parses [HOSTIP:]HOSTPORT:GUESTPORT[/tcp] (an IPv6 host
// address in brackets). Without HOSTIP the port is published on 127.0.0.1
// only: reaching a VM from other machines is asked for, never a default.
func ParsePublish(s string) (Publish, error) {
	bad := func(why string) (Publish, error) {
		return Publish{}, fmt.Errorf("--publish %q: %s (want [HOSTIP:]HOSTPORT:GUESTPORT[/tcp])", s, why)
	}
	spec, proto, hasProto := strings.Cut(s, "/")
	if hasProto && proto != "tcp" {
		return bad("only tcp is published")
	}
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return bad("no guest port")
	}
	guest, err := port(spec[i+1:])
	if err != nil {
		return bad("guest port: " + err.Error())
	}
	host := spec[:i]
	if !strings.Contains(host, ":") {
		host = "127.0.0.1:" + host
	}
	ap, err := netip.ParseAddrPort(host)
	if err != nil {
		return bad("host address: " + err.Error())
	}
	if ap.Port() == 0 {
		return bad("host port 0")
	}
	return Publish{Host: ap, GuestPort: guest}, nil
}

func port(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return uint16(n), nil
}

// publisher forwards the published host ports, in vlctl's own (the
// host's) network namespace, to the guest's address as the outside
// namespace reaches it: a user-space relay, so nothing on the host's
// firewall or sysctls changes.
type publisher struct {
	target  netip.Addr     // the pod address, in the outside namespace
	outside netns.NsHandle // the outside namespace
	status  io.Writer      // gets a line for each connection that fails
	lis     []net.Listener
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// publish listens on every published host port; a port that cannot be
// bound fails the run before the guest boots.
func (r *runner) publish() error {
	if len(r.cfg.Publish) == 0 {
		return nil
	}
	if r.net == nil {
		return errors.New("--publish: the VMI has no pod network interface to publish ports of")
	}
	if err := r.net.checkPublished(r.cfg.Publish); err != nil {
		return err
	}
	p := &publisher{target: r.net.pod.Pod4.Addr(), outside: r.net.pod.Outside, conns: map[net.Conn]struct{}{}, status: r.cfg.Status}
	r.pub = p
	for _, pb := range r.cfg.Publish {
		l, err := net.Listen("tcp", pb.Host.String())
		if err != nil {
			return fmt.Errorf("--publish %s: %w", pb, err)
		}
		p.lis = append(p.lis, l)
		p.wg.Add(1)
		go p.serve(l, pb.GuestPort)
		r.progress("published %s", pb)
	}
	return nil
}

func (p *publisher) serve(l net.Listener, guestPort uint16) {
	defer p.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.relay(c, netip.AddrPortFrom(p.target, guestPort))
		}()
	}
}

// relay connects to the guest from the outside namespace and copies both
// ways until both sides are done.
func (p *publisher) relay(c net.Conn, to netip.AddrPort) {
	defer c.Close()
	var g net.Conn
	err := plan.InNS(p.outside, func() error {
		// The socket is made on this thread, in the outside namespace;
		// connecting it may finish on any thread.
		var err error
		g, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	})
	if err != nil {
		// The guest does not listen (yet): the client sees a close.
		fmt.Fprintf(p.status, "vlctl: published port: connect to the guest at %s: %v\n", to, err)
		return
	}
	defer g.Close()
	if !p.track(c, g) {
		return
	}
	defer p.untrack(c, g)
	done := make(chan struct{}, 2)
	half := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go half(g, c)
	go half(c, g)
	<-done
	<-done
}

func (p *publisher) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *publisher) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// close stops listening, ends every relayed connection and waits for the
// relays to return.
func (p *publisher) close() {
	p.mu.Lock()
	p.closed = true
	for _, l := range p.lis {
		l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// checkPublished refuses a guest port the pod interface's masquerade
// binding does not forward: with ports declared, only those reach the
// guest, and a published port would only ever refuse connections.
func (n *network) checkPublished(pubs []Publish) error {
	for _, it := range n.plan {
		if it.PodIface != "eth0" || it.Binding != plan.BindingMasquerade || len(it.Ports) == 0 {
			continue
		}
		var declared []string
		ok := map[uint16]bool{}
		for _, pt := range it.Ports {
			if strings.EqualFold(pt.Protocol, "TCP") || pt.Protocol == "" {
				ok[uint16(pt.Port)] = true
				declared = append(declared, strconv.Itoa(int(pt.Port)))
			}
		}
		for _, pb := range pubs {
			if !ok[pb.GuestPort] {
				return fmt.Errorf("--publish %s: interface %s declares the ports it forwards (TCP %s), and %d is not one of them",
					pb, it.Name, strings.Join(declared, ", "), pb.GuestPort)
			}
		}
	}
	return nil
}
