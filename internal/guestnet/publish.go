// Package guestnet is the guest's network services that vlctl run serves
// from the host: --publish (host ports relayed into the pod), the DNS
// relay, and the guest's egress relay. None changes a route, rule or
// sysctl of the host.
package guestnet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

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

// Recorded is p as the run's record lists it (ParseRecorded reads it).
func (p Publish) Recorded() string { return fmt.Sprintf("%s->%d/tcp", p.Host, p.GuestPort) }

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

// HeldPorts are the --publish listeners of a whole `vlctl run`: bound
// for its first boot and kept across the restarts of its run strategy,
// so that no other local user can take a port while the guest starts
// again. Each boot points them at its own pod (point); a connection that
// comes between two boots is closed at once.
type HeldPorts struct {
	relay *relay.Relay
	// lmu guards bound: the control socket's migrate request hands the
	// listeners over from a goroutine of its own.
	lmu   sync.Mutex
	bound map[netip.AddrPort]net.Listener // by host address

	// mu is held for reading through each dial into the pod: unpoint
	// waits for them, so no dial uses the pod's namespace once its
	// network is torn down.
	mu  sync.RWMutex
	pod *PodTarget // nil between boots
}

// PodTarget is where published connections go: the pod's address,
// reached from its outside namespace.
type PodTarget struct {
	Outside netns.NsHandle
	Addr    netip.Addr
}

func NewHeldPorts(status io.Writer) *HeldPorts {
	return &HeldPorts{
		relay: relay.NewLimited(publishLimits, func(what string, err error) { fmt.Fprintf(status, "vlctl: %s: %v\n", what, err) }),
		bound: map[netip.AddrPort]net.Listener{},
	}
}

// Bind listens on every published host port not listened on yet,
// waiting up to wait for one still in use.
func (h *HeldPorts) Bind(pubs []Publish, wait time.Duration) error {
	for _, pb := range pubs {
		if h.Listener(pb) != nil {
			continue
		}
		l, err := listenFreed(pb.Host.String(), wait)
		if err != nil {
			return fmt.Errorf("--publish %s: %w", pb, err)
		}
		h.serve(pb, l)
	}
	return nil
}

// Listener is pb's listener, nil when it is not listened on.
func (h *HeldPorts) Listener(pb Publish) net.Listener {
	h.lmu.Lock()
	defer h.lmu.Unlock()
	return h.bound[pb.Host]
}

// serve relays what l, pb's listener, accepts to the guest's port.
func (h *HeldPorts) serve(pb Publish, l net.Listener) {
	h.lmu.Lock()
	h.bound[pb.Host] = l
	h.lmu.Unlock()
	guest := pb.GuestPort
	h.relay.Serve(l, fmt.Sprintf("published port %s", pb), func(net.Conn) (net.Conn, error) {
		h.mu.RLock()
		defer h.mu.RUnlock()
		if h.pod == nil {
			return nil, errors.New("the guest is not running (it starts again)")
		}
		to := netip.AddrPortFrom(h.pod.Addr, guest)
		g, err := DialIn(h.pod.Outside, to)
		if err != nil {
			return nil, fmt.Errorf("connect to the guest at %s: %w", to, err)
		}
		return g, nil
	})
}

// Point sends the published connections to pod from now on.
func (h *HeldPorts) Point(pod *PodTarget) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pod = pod
}

// Unpoint ends the connections to the pod, which is going away, and
// closes those that come until the next point; the ports stay bound.
func (h *HeldPorts) Unpoint() {
	h.Point(nil)
	h.relay.EndConns()
}

// Close releases the ports, at the end of the `vlctl run`.
func (h *HeldPorts) Close() { h.relay.Close() }

// A run whose guest migrated to another run hands its published listeners
// over with the migration's answer (migrate.go): the listening sockets
// themselves move, so a port is never free for another local user to bind
// (and answer in the guest's place) while the guest changes runs.

// DupListeners duplicates the held listeners of pubs, to hand to another
// run; ports names each (Publish.Recorded). The caller closes fds.
func (h *HeldPorts) DupListeners(pubs []Publish) (fds []int, ports []string, err error) {
	for _, pb := range pubs {
		sc, ok := h.Listener(pb).(syscall.Conn)
		if !ok {
			continue
		}
		rc, err := sc.SyscallConn()
		var fd int
		var derr error
		if err == nil {
			err = rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
		}
		if err = errors.Join(err, derr); err != nil {
			CloseFDs(fds)
			return nil, nil, fmt.Errorf("--publish %s: %w", pb, err)
		}
		fds, ports = append(fds, fd), append(ports, pb.Recorded())
	}
	return fds, ports, nil
}

func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Release closes this run's listeners of ports (Publish.Recorded), which
// another run serves now.
func (h *HeldPorts) Release(pubs []Publish, ports []string) {
	h.lmu.Lock()
	defer h.lmu.Unlock()
	for _, pb := range pubs {
		if l := h.bound[pb.Host]; l != nil && slices.Contains(ports, pb.Recorded()) {
			delete(h.bound, pb.Host)
			l.Close()
		}
	}
}

// Adopt serves the listening sockets files that the run the guest came
// from handed over, ports naming each (Publish.Recorded). Each must be a
// listening TCP socket bound to the host address of one of pubs, which
// is not listened on here yet; one that is not is refused (and its port
// bound afresh by bind). Every file is closed.
func (h *HeldPorts) Adopt(pubs []Publish, ports []string, files []*os.File) error {
	var errs []error
	for i, f := range files {
		name := ""
		if i < len(ports) {
			name = ports[i]
		}
		if err := h.adoptOne(pubs, name, f); err != nil {
			errs = append(errs, err)
		}
		f.Close()
	}
	if len(ports) > len(files) {
		errs = append(errs, fmt.Errorf("%d published ports named but %d sockets came", len(ports), len(files)))
	}
	return errors.Join(errs...)
}

func (h *HeldPorts) adoptOne(pubs []Publish, name string, f *os.File) error {
	i := slices.IndexFunc(pubs, func(pb Publish) bool { return pb.Recorded() == name })
	if i < 0 {
		return fmt.Errorf("a socket handed over for %q, which is not a port this run publishes: refused", name)
	}
	pb := pubs[i]
	if h.Listener(pb) != nil {
		return fmt.Errorf("--publish %s: a second socket handed over for it: refused", pb)
	}
	if err := checkListening(f, pb.Host); err != nil {
		return fmt.Errorf("--publish %s: the socket handed over: %w; refused", pb, err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		return fmt.Errorf("--publish %s: the socket handed over: %w", pb, err)
	}
	h.serve(pb, l)
	return nil
}

// checkListening checks what the kernel says of the socket f before
// anything is served from it: a TCP (or multipath TCP) socket, listening
// (SO_ACCEPTCONN),
// bound to addr (getsockname).
func checkListening(f *os.File, addr netip.AddrPort) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = checkListeningFD(int(fd), addr) }); err != nil {
		return err
	}
	return cerr
}

func checkListeningFD(fd int, want netip.AddrPort) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return fmt.Errorf("not a socket: %w", err)
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return fmt.Errorf("its protocol: %w", err)
	}
	// Go listens with multipath TCP where the kernel has it.
	if typ != unix.SOCK_STREAM || (proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_MPTCP) {
		return fmt.Errorf("not a TCP socket (type %d, protocol %d)", typ, proto)
	}
	if acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 1 {
		return fmt.Errorf("not listening (%d, %v)", acc, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("its address: %w", err)
	}
	var got netip.AddrPort
	dualStack := false
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		got = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		got = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
		v6only, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		dualStack = err == nil && v6only == 0
	default:
		return fmt.Errorf("not an IP socket (%T)", sa)
	}
	want = netip.AddrPortFrom(want.Addr().WithZone("").Unmap(), want.Port())
	// Go listens on the IPv4 wildcard with a dual-stack IPv6 socket (::).
	wildcard := want.Addr().Is4() && want.Addr().IsUnspecified() && got.Addr().IsUnspecified() && dualStack && got.Port() == want.Port()
	if got != want && !wildcard {
		return fmt.Errorf("bound to %s, not %s", got, want)
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

// DialIn connects to addr from the namespace ns: the socket is made on
// this thread, in ns; connecting it may finish on any thread.
func DialIn(ns netns.NsHandle, to netip.AddrPort) (net.Conn, error) {
	var g net.Conn
	err := plan.InNS(ns, func() error {
		var err error
		g, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	})
	return g, err
}

// CheckPublished refuses a guest port the pod interface's masquerade or
// passt binding does not forward: with ports declared, only those reach the
// guest, and a published port would only ever refuse connections.
func CheckPublished(n *pod.Network, pubs []Publish) error {
	for _, it := range n.Plan {
		if it.PodIface != "eth0" || (it.Binding != plan.BindingMasquerade && it.Binding != plan.BindingPasst) || len(it.Ports) == 0 {
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

// ParseRecorded are the ports a run published, from its record
// ("HOSTIP:HOSTPORT->GUESTPORT/tcp", Publish.Recorded).
func ParseRecorded(recorded []string) ([]Publish, error) {
	var out []Publish
	for _, s := range recorded {
		pb, err := ParsePublish(strings.Replace(s, "->", ":", 1))
		if err != nil {
			return nil, fmt.Errorf("its published port %q: %w", s, err)
		}
		out = append(out, pb)
	}
	return out, nil
}
