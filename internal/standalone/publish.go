package standalone

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/relay"
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

// recorded is p as the run's record lists it (recordedPublish reads it).
func (p Publish) recorded() string { return fmt.Sprintf("%s->%d/tcp", p.Host, p.GuestPort) }

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

// publishLimits bound the connections to one VM's published ports, all
// ports together: at most 64 at once (whoever reaches the host's port
// decides how many come, and each holds two of vlctl's descriptors), each
// closed after an hour without a byte either way (an idle ssh session
// with ServerAliveInterval set stays).
var publishLimits = relay.Limits{MaxConns: 64, Idle: time.Hour}

// publish listens on every published host port and relays each
// connection to the guest's port at the pod address, connecting from the
// outside namespace; a port that cannot be bound fails the run before the
// guest boots.
// A port still in use is waited for up to wait: a run that took its
// guest over by migration publishes the ports the old run holds until it
// ends.
func (r *runner) publish(wait time.Duration) error {
	if len(r.cfg.Publish) == 0 {
		return nil
	}
	if r.net == nil {
		return errors.New("--publish: the VMI has no pod network interface to publish ports of")
	}
	if err := checkPublished(r.net, r.cfg.Publish); err != nil {
		return err
	}
	p := relay.NewLimited(publishLimits, func(what string, err error) { fmt.Fprintf(r.cfg.Status, "vlctl: %s: %v\n", what, err) })
	r.pub = p
	target, outside := r.net.Pod4.Addr(), r.net.Outside
	for _, pb := range r.cfg.Publish {
		l, err := listenFreed(pb.Host.String(), wait)
		if err != nil {
			return fmt.Errorf("--publish %s: %w", pb, err)
		}
		to := netip.AddrPortFrom(target, pb.GuestPort)
		p.Serve(l, fmt.Sprintf("published port: connect to the guest at %s", to), func(net.Conn) (net.Conn, error) {
			return dialIn(outside, to)
		})
		r.progress("published %s", pb)
	}
	return nil
}

// listenFreed listens on addr, waiting up to wait for it to be freed.
func listenFreed(addr string, wait time.Duration) (net.Listener, error) {
	deadline := time.Now().Add(wait)
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dialIn connects to addr from the namespace ns: the socket is made on
// this thread, in ns; connecting it may finish on any thread.
func dialIn(ns netns.NsHandle, to netip.AddrPort) (net.Conn, error) {
	var g net.Conn
	err := plan.InNS(ns, func() error {
		var err error
		g, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	})
	return g, err
}

// checkPublished refuses a guest port the pod interface's masquerade
// binding does not forward: with ports declared, only those reach the
// guest, and a published port would only ever refuse connections.
func checkPublished(n *pod.Network, pubs []Publish) error {
	for _, it := range n.Plan {
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
