package standalone

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// The guest's way out (egress): a TCP connection the guest makes to any
// address leaves its pod through the masquerade NAT like in a cluster and
// reaches the run's outside namespace, where an nftables redirect (in that
// namespace, the run's own) turns it to a relay in vlctl; the relay
// connects to the address the guest asked for from the host's namespace,
// as any program of the host would, and copies both ways. No route, rule
// or sysctl of the host changes. UDP other than DNS (relayed on its own)
// and ICMP do not get out; neither does IPv6.

// egressDialTimeout bounds the relay's connect to the guest's destination.
const egressDialTimeout = 10 * time.Second

// egressRefused says why the relay does not connect to dst for the guest:
// the host's own loopback (a guest must not reach services the host keeps
// to itself), link-local addresses (cloud metadata services hand out the
// host's credentials there), and what is not a unicast address.
func egressRefused(dst netip.Addr) error {
	switch {
	case dst.IsLoopback():
		return errors.New("the host's loopback is not reachable from the guest")
	case dst.IsLinkLocalUnicast():
		return errors.New("link-local addresses (cloud metadata services) are not reachable from the guest")
	case !dst.IsGlobalUnicast() && !dst.IsPrivate():
		return errors.New("not a unicast address")
	}
	return nil
}

// startEgress sets up the guest's way out (see above); without a pod
// network, or with --no-egress, there is none.
func (r *runner) startEgress() error {
	if r.net == nil || r.cfg.NoEgress {
		return nil
	}
	pod := r.net.Pod
	local := pod.Outside4.Addr()
	var l net.Listener
	if err := plan.InNS(pod.Outside, func() (err error) {
		l, err = net.Listen("tcp", netip.AddrPortFrom(local, 0).String())
		return err
	}); err != nil {
		return fmt.Errorf("guest egress: %w", err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	if err := netsetup.RedirectEgress(pod.Outside, pod.OutsideIface, local, port); err != nil {
		l.Close()
		return fmt.Errorf("guest egress: %w", err)
	}
	rl := r.newRelay()
	r.egress = rl
	rl.Serve(l, "guest egress", func(c net.Conn) (net.Conn, error) {
		dst, err := originalDst(c)
		if err != nil {
			return nil, err
		}
		if err := egressRefused(dst.Addr()); err != nil {
			return nil, fmt.Errorf("to %s: %w", dst, err)
		}
		g, err := net.DialTimeout("tcp", dst.String(), egressDialTimeout)
		if err != nil {
			return nil, fmt.Errorf("to %s: %w", dst, err)
		}
		return g, nil
	})
	r.progress("guest egress: TCP to the addresses this host reaches, relayed (not the host's loopback or link-local)")
	return nil
}

// stopEgress ends the relay and its redirect.
func (r *runner) stopEgress() error {
	if r.egress == nil {
		return nil
	}
	r.egress.Close()
	r.egress = nil
	return netsetup.RemoveEgress(r.net.Outside)
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
