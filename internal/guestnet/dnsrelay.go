package guestnet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/relay"
)

// dnsTimeout bounds one upstream exchange.
const dnsTimeout = 3 * time.Second

// DNSRelay answers the guest's DNS queries where its resolver is (the
// pod's nameserver: the outside address, port 53/udp, in the run's
// outside namespace) by asking the host's resolvers from vlctl's own
// namespace, so the guest resolves names as the host does without any
// route, rule or sysctl of the host changing. UDP only.
type DNSRelay struct {
	conn     net.PacketConn
	status   io.Writer // hears of read errors
	upstream []string
	sem      chan struct{} // bounds the exchanges in flight
	wg       sync.WaitGroup
}

// HostResolvers reads the nameservers of the host's resolv.conf, as
// host:53.
func HostResolvers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53).String())
			}
		}
	}
	return out, sc.Err()
}

// StartDNSRelay listens at addr:53/udp in the namespace outside.
func StartDNSRelay(outside netns.NsHandle, addr netip.Addr, upstream []string, status io.Writer) (*DNSRelay, error) {
	if len(upstream) == 0 {
		return nil, errors.New("no upstream resolver")
	}
	var conn net.PacketConn
	if err := plan.InNS(outside, func() error {
		var err error
		conn, err = net.ListenPacket("udp", netip.AddrPortFrom(addr, 53).String())
		return err
	}); err != nil {
		return nil, fmt.Errorf("DNS relay: %w", err)
	}
	d := &DNSRelay{conn: conn, status: status, upstream: upstream, sem: make(chan struct{}, 64)}
	d.wg.Add(1)
	go d.serve()
	return d, nil
}

// serve answers queries until the socket is closed; a read error
// otherwise (a vlctl short of memory or buffers) is retried with
// relay.Backoff, as an accept loop's.
func (d *DNSRelay) serve() {
	defer d.wg.Done()
	var b relay.Backoff
	var rep relay.Reporter
	for {
		buf := make([]byte, 1500)
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			wait, ok := b.Retry(err)
			if !ok {
				return
			}
			rep.Printf(d.statusf, "vlctl: DNS relay: %v (retried after %v)\n", err, wait)
			continue
		}
		b.Reset()
		select {
		case d.sem <- struct{}{}:
		default:
			continue // too many in flight: the guest's resolver retries
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer func() { <-d.sem }()
			if reply := d.exchange(buf[:n]); reply != nil {
				d.conn.WriteTo(reply, from)
			}
		}()
	}
}

func (d *DNSRelay) statusf(format string, a ...any) { fmt.Fprintf(d.status, format, a...) }

// exchange asks the upstream resolvers in turn; nil when none answers.
func (d *DNSRelay) exchange(q []byte) []byte {
	for _, up := range d.upstream {
		c, err := net.DialTimeout("udp", up, dnsTimeout)
		if err != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(dnsTimeout))
		reply := make([]byte, 65535)
		n := 0
		if _, err = c.Write(q); err == nil {
			n, err = c.Read(reply)
		}
		c.Close()
		if err == nil && n > 0 {
			return reply[:n]
		}
	}
	return nil
}

// Close stops the relay and waits for the exchanges under way (bounded by
// dnsTimeout each).
func (d *DNSRelay) Close() {
	d.conn.Close()
	d.wg.Wait()
}
