package guestnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/relay"
)

// The guest's way out (egress): a TCP connection the guest makes to any
// address leaves its pod through the masquerade NAT like in a cluster and
// reaches the run's outside namespace, where an nftables redirect (in that
// namespace, the run's own) turns it to a relay in vlctl; the relay
// connects to the address the guest asked for from the host's namespace
// and copies both ways. No route, rule or sysctl of the host changes. UDP
// other than DNS (relayed on its own) and ICMP do not get out; neither
// does IPv6.
//
// The guest reaches what any program of the host reaches, but the host
// itself: the relay refuses every address of the host (read from the
// host's interfaces at each connection, so one added later is refused
// too, and any address the host's routes deliver locally), loopback,
// link-local, unspecified, multicast and broadcast addresses, and the
// cloud metadata endpoints of metadataEndpoints. And its socket is the
// VM's, not root's: it is made with the VM's uid and gid as its owner, so
// a firewall rule of the host that matches the owner (iptables -m owner,
// nftables meta skuid) and lets root alone through does not let guests
// through.

// IDs are the VM's user and group, which own the relay's sockets.
type IDs struct{ UID, GID int }

// egressDialTimeout bounds the relay's connect to the guest's destination.
const egressDialTimeout = 10 * time.Second

// EgressLimits bound one VM's egress: at most 256 connections at once (a
// guest holding more would drive vlctl, root's, to its file limit), each
// closed after an hour without a byte either way.
var EgressLimits = relay.Limits{MaxConns: 256, Idle: time.Hour}

// metadataEndpoints are cloud metadata services outside the link-local
// range (169.254.169.254, the address most clouds use, is link-local and
// refused as such): Azure's wireserver, Alibaba Cloud's metadata service,
// and AWS's IPv6 instance metadata service.
var metadataEndpoints = []netip.Addr{
	netip.MustParseAddr("168.63.129.16"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("fd00:ec2::254"),
}

// thisNetwork is 0.0.0.0/8, which Linux connects to the host itself.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// egressRefused says why the relay does not connect to dst for the guest
// (nil: it may), given the addresses of the host (hostAddrs).
func egressRefused(dst netip.Addr, host []netip.Addr) error {
	dst = dst.Unmap()
	switch {
	case dst.IsLoopback():
		return errors.New("the host's loopback is not reachable from the guest")
	case dst.IsLinkLocalUnicast():
		return errors.New("link-local addresses (cloud metadata services) are not reachable from the guest")
	case slices.Contains(metadataEndpoints, dst):
		return errors.New("a cloud metadata service is not reachable from the guest")
	case slices.Contains(host, dst):
		return errors.New("the host's own addresses are not reachable from the guest")
	case thisNetwork.Contains(dst), !dst.IsGlobalUnicast() && !dst.IsPrivate():
		return errors.New("not a unicast address")
	}
	return nil
}

// hostAddrs lists the addresses of every interface of this thread's
// network namespace (the host's, for the relay), with the broadcast
// address of each IPv4 network, and dst itself when the host's routes
// deliver it locally or as a broadcast (a local route of a whole range,
// say).
func hostAddrs(dst netip.Addr) ([]netip.Addr, error) {
	as, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("the host's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range as {
		for _, ip := range []net.IP{a.IP, a.Broadcast} {
			if x, ok := netip.AddrFromSlice(ip); ok {
				out = append(out, x.Unmap())
			}
		}
	}
	rs, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		// No route: the connect fails by itself.
		return out, nil
	}
	for _, r := range rs {
		if r.Type == unix.RTN_LOCAL || r.Type == unix.RTN_BROADCAST || r.Type == unix.RTN_MULTICAST {
			out = append(out, dst)
		}
	}
	return out, nil
}

// ServeEgress listens in p's outside namespace, turns the guest's TCP
// connections there and relays each, connecting as the VM's ids (id);
// each refused or failed connection is a line on status.
func ServeEgress(p *podnet.Pod, id IDs, status io.Writer) (*relay.Relay, error) {
	local := p.Outside4.Addr()
	var l net.Listener
	if err := plan.InNS(p.Outside, func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(local, 0).String())
		return err
	}); err != nil {
		return nil, fmt.Errorf("guest egress: %w", err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	if err := netsetup.RedirectEgress(p.Outside, p.OutsideIface, local, port); err != nil {
		l.Close()
		return nil, fmt.Errorf("guest egress: %w", err)
	}
	rl := relay.NewLimited(EgressLimits, func(what string, err error) { fmt.Fprintf(status, "vlctl: %s: %v\n", what, err) })
	rl.Serve(l, "guest egress", func(c net.Conn) (net.Conn, error) {
		dst, err := originalDst(c)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), egressDialTimeout)
		defer cancel()
		g, err := dialEgress(ctx, dst, id)
		if err != nil {
			return nil, fmt.Errorf("to %s: %w", dst, err)
		}
		return g, nil
	})
	return rl, nil
}

// dialEgress connects to dst for the guest, unless egressRefused refuses
// it: checked before the connect and again after it (an address the host
// took meanwhile), before a byte goes.
func dialEgress(ctx context.Context, dst netip.AddrPort, id IDs) (net.Conn, error) {
	check := func() error {
		host, err := hostAddrs(dst.Addr())
		if err != nil {
			return err
		}
		return egressRefused(dst.Addr(), host)
	}
	if err := check(); err != nil {
		return nil, err
	}
	c, err := dialAs(ctx, dst, id)
	if err != nil {
		return nil, err
	}
	if err := check(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// dialAs connects to dst with a socket owned by id's uid and gid. Linux
// gives a socket the filesystem ids of the thread that makes it: the
// socket is made on a thread of its own whose fs ids are the VM's, which
// are root's again before the connect, made through Go's poller with
// ctx's deadline. A thread whose fs ids could not be put back is never
// used again: its goroutine ends locked to it, and the runtime ends it.
func dialAs(ctx context.Context, dst netip.AddrPort, id IDs) (net.Conn, error) {
	type dialed struct {
		c   net.Conn
		err error
	}
	out := make(chan dialed, 1)
	go func() {
		runtime.LockOSThread()
		uid, gid := setfs(-1, -1)
		restored := false
		restore := func() error {
			if u, g := setfs(uid, gid); u != uid || g != gid {
				return fmt.Errorf("the relay's thread kept fs ids %d:%d, not %d:%d", u, g, uid, gid)
			}
			restored = true
			runtime.UnlockOSThread()
			return nil
		}
		if u, g := setfs(id.UID, id.GID); u != id.UID || g != id.GID {
			err := fmt.Errorf("take the fs ids %d:%d for the guest's socket: have %d:%d", id.UID, id.GID, u, g)
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			out <- dialed{err: err}
			return
		}
		d := net.Dialer{Control: func(string, string, syscall.RawConn) error {
			// The socket is made and the guest's: root's ids again.
			return restore()
		}}
		c, err := d.DialContext(ctx, "tcp", dst.String())
		if !restored {
			if rerr := restore(); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		out <- dialed{c, err}
	}()
	d := <-out
	return d.c, d.err
}

// setfs sets this thread's filesystem uid and gid (-1 leaves one as it
// is) and returns them as they are after.
func setfs(uid, gid int) (int, int) {
	unix.SetfsgidRetGid(gid)
	unix.SetfsuidRetUid(uid)
	u, _ := unix.SetfsuidRetUid(-1)
	g, _ := unix.SetfsgidRetGid(-1)
	return u, g
}

// originalDst is where a redirected connection was going
// (SO_ORIGINAL_DST, which netfilter keeps for it).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	var mreq *unix.IPv6Mreq
	var serr error
	if err := raw.Control(func(fd uintptr) {
		// struct sockaddr_in, read through the 16-byte IPv6Mreq as Go
		// has no getsockopt for it: family, port (big endian), address.
		mreq, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", serr)
	}
	b := mreq.Multiaddr
	port := uint16(b[2])<<8 | uint16(b[3])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port), nil
}
