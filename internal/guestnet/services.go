package guestnet

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/relay"
)

// ServicesConfig is what a boot's guest network services are made of.
type ServicesConfig struct {
	// Ports are the run's published listeners (nil without --publish),
	// held across its boots; Publish are the --publish flags they serve.
	Ports   *HeldPorts
	Publish []Publish
	// DNS are the resolvers the guest's queries go to; empty for the
	// host's (/etc/resolv.conf).
	DNS []string
	// NoEgress leaves the guest without a way out beyond DNS.
	NoEgress bool
	// IDs are the VM's user and group, which the egress relay connects
	// as.
	IDs IDs
	// Name is the VM's user's name, for the progress line.
	Name string
	// Status takes warnings; Progress, when set, what is being done.
	Status   io.Writer
	Progress func(format string, a ...any)
}

// Services are the guest's network services of one boot on its pod
// network: the DNS relay, the published ports pointed at the pod and the
// egress relay. Start starts them in that order (the ports only when asked:
// a guest migrating in is published once it is here, Publish); Close ends
// what started.
type Services struct {
	c      ServicesConfig
	net    *pod.Network // nil: the VMI has no pod network
	dns    *DNSRelay    // once listening
	egress *relay.Relay // once listening
	pub    bool         // the published ports point at this pod
}

// NewServices makes the services of one boot; nothing runs before Start.
func NewServices(c ServicesConfig) *Services {
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	return &Services{c: c}
}

// Start starts the services on the pod network n (nil: the VMI has none,
// and only a --publish, refused, can fail): the DNS relay (without which
// the guest has no resolver, a warning), the published ports when publish
// (a port that cannot be bound fails the boot before the guest runs), and
// the guest's egress unless --no-egress.
func (s *Services) Start(n *pod.Network, publish bool) error {
	s.net = n
	if n != nil {
		s.relayDNS()
	}
	if publish {
		if err := s.Publish(0); err != nil {
			return err
		}
	}
	return s.startEgress()
}

// relayDNS starts the guest's DNS relay.
func (s *Services) relayDNS() {
	upstream := s.c.DNS
	if len(upstream) == 0 {
		var err error
		if upstream, err = HostResolvers("/etc/resolv.conf"); err != nil {
			fmt.Fprintf(s.c.Status, "vlctl: warning: the guest gets no DNS: host resolvers: %v\n", err)
			return
		}
	}
	d, err := StartDNSRelay(s.net.Outside, s.net.Resolver, upstream, s.c.Status)
	if err != nil {
		fmt.Fprintf(s.c.Status, "vlctl: warning: the guest gets no DNS: %v\n", err)
		return
	}
	s.dns = d
	s.c.Progress("guest DNS relayed to %s", strings.Join(upstream, ", "))
}

// Publish points the published host ports at this boot's pod, binding
// those not bound yet (the first boot). A guest that came by migration
// got the old run's listeners with it (Adopt) and only points them; a
// port the old run did not hand over (an older vlctl) is bound once the
// old run lets go of it, waited for up to wait.
func (s *Services) Publish(wait time.Duration) error {
	if len(s.c.Publish) == 0 {
		return nil
	}
	if s.net == nil {
		return errors.New("--publish: the VMI has no pod network interface to publish ports of")
	}
	if err := CheckPublished(s.net, s.c.Publish); err != nil {
		return err
	}
	if err := s.c.Ports.Bind(s.c.Publish, wait); err != nil {
		return err
	}
	s.c.Ports.Point(s.target())
	s.pub = true
	for _, pb := range s.c.Publish {
		s.c.Progress("published %s", pb)
	}
	return nil
}

func (s *Services) target() *PodTarget {
	return &PodTarget{Outside: s.net.Outside, Addr: s.net.Pod4.Addr()}
}

// Adopt serves the published listeners the run the guest came from
// handed over (ports naming each), pointed at this pod first: what
// connected while they were in flight waits in their backlog and reaches
// the guest here. What is refused is said; Publish binds that port
// afresh. The files are closed either way.
func (s *Services) Adopt(ports []string, files []*os.File) {
	if s.c.Ports == nil || s.net == nil {
		closeFiles(files)
		if len(files) > 0 {
			fmt.Fprintf(s.c.Status, "vlctl: warning: the old run handed over %d sockets, but this run publishes no port of a pod network: closed\n", len(files))
		}
		return
	}
	s.c.Ports.Point(s.target())
	if err := s.c.Ports.Adopt(s.c.Publish, ports, files); err != nil {
		fmt.Fprintf(s.c.Status, "vlctl: warning: published ports handed over: %v\n", err)
	}
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// startEgress sets up the guest's way out (ServeEgress); without a pod
// network, or with --no-egress, there is none.
func (s *Services) startEgress() error {
	if s.net == nil || s.c.NoEgress {
		return nil
	}
	rl, err := ServeEgress(s.net.Pod, s.c.IDs, s.c.Status)
	if err != nil {
		return err
	}
	s.egress = rl
	s.c.Progress("guest egress: TCP to the addresses this host reaches, relayed as %s (not the host's own addresses, loopback, link-local or cloud metadata services)", s.c.Name)
	return nil
}

// Close ends what Start and Publish started, before the pod network goes:
// the published ports stop going to the pod (they stay bound for the
// run's next boot), the egress relay and its redirect go, the DNS relay
// ends.
func (s *Services) Close() error {
	if s == nil {
		return nil
	}
	if s.pub {
		s.c.Ports.Unpoint()
		s.pub = false
	}
	var err error
	if s.egress != nil {
		s.egress.Close()
		s.egress = nil
		err = netsetup.RemoveEgress(s.net.Outside)
	}
	if s.dns != nil {
		s.dns.Close()
		s.dns = nil
	}
	return err
}
