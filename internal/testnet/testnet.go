// Package testnet gives tests stand-ins for the network around a host:
// a host of the internet in a namespace of its own, a service of the
// host itself on an address of the host's namespace, and a resolver on
// the host's loopback. Everything goes with
// the test that made it. They need root.
package testnet

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// FarHost stands in for a host of the internet: a network namespace of
// its own behind a veth from the host's namespace, whose host end has no
// address (the host reaches it by a /32 route, so its address is not the
// host's), with a web server answering body. 198.18.0.0/15 is for
// benchmarks; no traffic leaves the machine. All of it goes with the test.
func FarHost(t testing.TB, body string) netip.AddrPort {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	addr := netip.AddrFrom4([4]byte{198, 18, b[0], b[1] | 1})
	name := fmt.Sprintf("vltfar%x", b)
	ns, err := podnet.NewNamedNS(name)
	if err != nil {
		t.Fatalf("far host namespace: %v", err)
	}
	t.Cleanup(func() { ns.Close(); podnet.DeleteNamedNS(name) })
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p", PeerNamespace: netlink.NsFd(ns)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("far host link: %v", err)
	}
	t.Cleanup(func() { netlink.LinkDel(veth) })
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: veth.Index, Dst: plan.IPNet(netip.PrefixFrom(addr, 32)), Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatalf("route to the far host: %v", err)
	}
	var l net.Listener
	if err := plan.InNS(ns, func() error {
		peer, err := netlink.LinkByName(name + "p")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(peer, &netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(addr, 32))}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Dst: plan.IPNet(netip.MustParsePrefix("0.0.0.0/0")), Scope: netlink.SCOPE_LINK}); err != nil {
			return err
		}
		l, err = net.Listen("tcp", netip.AddrPortFrom(addr, 80).String())
		return err
	}); err != nil {
		t.Fatalf("far host: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// HostService adds an address to the host's namespace (on a veth of its
// own, gone with the test) and serves body there: a service of the host.
func HostService(t testing.TB, body string) netip.AddrPort {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	addr := netip.AddrFrom4([4]byte{198, 19, b[0], b[1] | 1})
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: fmt.Sprintf("vlth%x", b)}, PeerName: fmt.Sprintf("vlth%xp", b)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("host service link: %v", err)
	}
	t.Cleanup(func() { netlink.LinkDel(veth) })
	if err := netlink.AddrAdd(veth, &netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(addr, 32))}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	return ServeHTTP(t, netip.AddrPortFrom(addr, 0), body)
}

// ServeHTTP serves body at at (port 0: any) until the test ends.
func ServeHTTP(t testing.TB, at netip.AddrPort, body string) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", at.String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// TCPOwners lists the uids owning the TCP sockets of the host's namespace
// connected to remote (/proc/net/tcp: local, remote address, ..., uid).
func TCPOwners(remote netip.AddrPort) ([]int, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := remote.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], remote.Port())
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 7 && fs[2] == want && fs[3] == "01" { // established
			uid, err := strconv.Atoi(fs[7])
			if err != nil {
				return nil, fmt.Errorf("/proc/net/tcp: %q: %w", sc.Text(), err)
			}
			out = append(out, uid)
		}
	}
	return out, sc.Err()
}

// ServeDNS runs a resolver on the host's loopback that stands in for the
// host's resolvers (no query leaves this machine): vl-dns.test. is
// 192.0.2.42 (and has no IPv6 address), every other name does not exist.
// It returns its address.
func ServeDNS(t testing.TB) string {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			rh := dnsmessage.Header{ID: h.ID, Response: true, RecursionAvailable: true, RCode: dnsmessage.RCodeNameError}
			// The name exists (no AAAA: an empty answer); others do not.
			known := strings.EqualFold(q.Name.String(), "vl-dns.test.")
			if known {
				rh.RCode = dnsmessage.RCodeSuccess
			}
			b := dnsmessage.NewBuilder(nil, rh)
			b.StartQuestions()
			b.Question(q)
			if known && q.Type == dnsmessage.TypeA {
				b.StartAnswers()
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte{192, 0, 2, 42}})
			}
			if out, err := b.Finish(); err == nil {
				conn.WriteTo(out, from)
			}
		}
	}()
	return conn.LocalAddr().String()
}

// DialFromPod connects from the pod's namespace, as the guest does.
func DialFromPod(p *podnet.Pod, to netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := plan.InNS(p.NS, func() (err error) {
		c, err = net.DialTimeout("tcp", to.String(), 5*time.Second)
		return err
	})
	return c, err
}

// Fetch asks for / at to from the pod's namespace and returns the answer,
// "" when the connection was closed without one.
func Fetch(p *podnet.Pod, to netip.AddrPort) (string, error) {
	c, err := DialFromPod(p, to)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	b, err := io.ReadAll(c)
	return string(b), err
}
