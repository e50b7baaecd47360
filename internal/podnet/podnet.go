// Package podnet builds a stand-in for a Kubernetes pod's network for
// `vlctl run` and the tests: a "pod" network namespace whose eth0 is a veth
// to a second namespace playing the outside network, plus a resolv.conf
// for the pod. Every instance has unique names, so many can run at once.
package podnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// Config describes the pod network. Zero fields take the defaults.
type Config struct {
	Outside4, Pod4 netip.Prefix // 192.168.66.1/24, 192.168.66.2/24
	// Outside6/Pod6 give the pod an IPv6 address too (dual stack). Off when
	// NoIPv6; defaults fd00:66::1/64, fd00:66::2/64.
	Outside6, Pod6 netip.Prefix
	NoIPv6         bool
	MTU            int // 1500
	// Resolver is where the pod's resolver answers in the outside
	// namespace: Outside4's address by default. Any other address is put
	// on the outside namespace's loopback, reached through the pod's
	// default route, as a cluster's DNS service is.
	Resolver netip.Addr
	DNS      []string // nameservers written to the resolv.conf; default Resolver
	Search   []string // search domains
	// Dir is where resolv.conf is written (required): a directory only
	// root can change when root runs this, since the pod's user must not
	// be able to swap it (its last element may not be a link).
	Dir string
	// Name is the suffix of the namespaces' names (NewName), chosen
	// beforehand by a caller that records them before they exist; random
	// when empty.
	Name string
}

// NewName returns a random suffix for a pod network's names.
func NewName() (string, error) {
	id := make([]byte, 4)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("podnet: random name: %w", err)
	}
	return hex.EncodeToString(id), nil
}

// NamespaceNames are the pod and outside network namespaces of the pod
// network with that suffix.
func NamespaceNames(suffix string) (pod, outside string) {
	return "vlpod-" + suffix, "vlout-" + suffix
}

// namePattern is a suffix NewName makes.
var namePattern = regexp.MustCompile(`^[0-9a-f]{8}$`)

// IsNamespaceName tells a network namespace name that a pod network of
// this package makes, and only those: what a clean-up may delete.
func IsNamespaceName(name string) bool {
	for _, prefix := range []string{"vlpod-", "vlout-"} {
		if suffix, ok := strings.CutPrefix(name, prefix); ok && namePattern.MatchString(suffix) {
			return true
		}
	}
	return false
}

// Pod is one pod network and its outside.
type Pod struct {
	Name           string // unique suffix of every name below
	NSName         string // pod namespace, /run/netns/<NSName>
	OutsideName    string // outside namespace
	NS, Outside    netns.NsHandle
	Pod4, Outside4 netip.Prefix
	Pod6, Outside6 netip.Prefix // invalid when IPv6 is off
	MTU            int
	Resolver       netip.Addr // Config.Resolver
	ResolvConf     string
	// OutsideIface is the outside end of the pod's veth.
	OutsideIface string
	extra        int // secondary interfaces added
	guests       int // fake guests attached
}

func (c *Config) defaults() {
	if !c.Outside4.IsValid() {
		c.Outside4 = netip.MustParsePrefix("192.168.66.1/24")
	}
	if !c.Pod4.IsValid() {
		c.Pod4 = netip.MustParsePrefix("192.168.66.2/24")
	}
	if !c.NoIPv6 && !c.Outside6.IsValid() {
		c.Outside6 = netip.MustParsePrefix("fd00:66::1/64")
	}
	if !c.NoIPv6 && !c.Pod6.IsValid() {
		c.Pod6 = netip.MustParsePrefix("fd00:66::2/64")
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if !c.Resolver.IsValid() {
		c.Resolver = c.Outside4.Addr()
	}
	if c.DNS == nil {
		c.DNS = []string{c.Resolver.String()}
	}
	if c.Search == nil {
		c.Search = []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	}
}

// New creates the namespaces, the veth pair, addresses, routes and the
// resolv.conf. On error nothing is left behind.
func New(cfg Config) (p *Pod, err error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, fmt.Errorf("podnet: Dir for resolv.conf not set")
	}
	if cfg.Pod4.Masked() != cfg.Outside4.Masked() {
		return nil, fmt.Errorf("podnet: pod %s and outside %s not in one subnet", cfg.Pod4, cfg.Outside4)
	}
	suffix := cfg.Name
	if suffix == "" {
		if suffix, err = NewName(); err != nil {
			return nil, err
		}
	} else if !namePattern.MatchString(suffix) {
		return nil, fmt.Errorf("podnet: name %q: want 8 hex digits", suffix)
	}
	podNS, outsideNS := NamespaceNames(suffix)
	p = &Pod{
		Name: suffix, NSName: podNS, OutsideName: outsideNS,
		Pod4: cfg.Pod4, Outside4: cfg.Outside4, MTU: cfg.MTU, OutsideIface: "ext0", Resolver: cfg.Resolver,
	}
	if !cfg.NoIPv6 {
		p.Pod6, p.Outside6 = cfg.Pod6, cfg.Outside6
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Remove())
			p = nil
		}
	}()
	if p.NS, err = NewNamedNS(p.NSName); err != nil {
		return p, err
	}
	if p.Outside, err = NewNamedNS(p.OutsideName); err != nil {
		return p, err
	}

	// Create the pair from inside the outside namespace, placing eth0
	// directly in the pod namespace: no name ever exists on the host.
	err = plan.InNS(p.Outside, func() error {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: p.OutsideIface, MTU: cfg.MTU},
			PeerName:  "eth0",
		}
		veth.PeerNamespace = netlink.NsFd(p.NS)
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("create veth: %w", err)
		}
		if err := configure(p.OutsideIface, cfg.Outside4, cfg.Outside6, netip.Addr{}, netip.Addr{}); err != nil {
			return err
		}
		if cfg.Resolver == cfg.Outside4.Addr() {
			return nil
		}
		return addResolver(cfg.Resolver)
	})
	if err != nil {
		return p, fmt.Errorf("podnet outside: %w", err)
	}
	gw6 := netip.Addr{}
	if !cfg.NoIPv6 {
		gw6 = cfg.Outside6.Addr()
	}
	if err = plan.InNS(p.NS, func() error {
		return configure("eth0", cfg.Pod4, cfg.Pod6, cfg.Outside4.Addr(), gw6)
	}); err != nil {
		return p, fmt.Errorf("podnet pod: %w", err)
	}

	var rc strings.Builder
	for _, d := range cfg.DNS {
		fmt.Fprintf(&rc, "nameserver %s\n", d)
	}
	if len(cfg.Search) > 0 {
		fmt.Fprintf(&rc, "search %s\n", strings.Join(cfg.Search, " "))
	}
	rc.WriteString("options ndots:5\n")
	// Root writes it: never through a link at its name or in place of Dir.
	rcPath := filepath.Join(cfg.Dir, "resolv.conf."+suffix)
	if err = safefs.WriteFile(rcPath, []byte(rc.String()), 0o644); err != nil {
		return p, fmt.Errorf("podnet resolv.conf: %w", err)
	}
	p.ResolvConf = rcPath
	return p, nil
}

// addResolver (inside the outside namespace) puts the resolver's address on
// its loopback.
func addResolver(a netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(a, a.BitLen()))}); err != nil {
		return fmt.Errorf("resolver address %s: %w", a, err)
	}
	return nil
}

// configure (inside the namespace) brings lo and the link up with its
// addresses and, when gw is valid, a default route through it.
func configure(name string, a4, a6 netip.Prefix, gw4, gw6 netip.Addr) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, a := range []netip.Prefix{a4, a6} {
		if !a.IsValid() {
			continue
		}
		addr := &netlink.Addr{IPNet: plan.IPNet(a), Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, name, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("%s up: %w", name, err)
	}
	for _, gw := range []netip.Addr{gw4, gw6} {
		if !gw.IsValid() {
			continue
		}
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(gw.AsSlice())}
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("default route via %s: %w", gw, err)
		}
	}
	return nil
}

// Remove deletes both namespaces (and so every link, address and rule in
// them) and the resolv.conf. It can be called more than once.
func (p *Pod) Remove() error {
	var errs []error
	for _, h := range []*netns.NsHandle{&p.NS, &p.Outside} {
		if *h > 0 {
			h.Close()
			*h = 0
		}
	}
	for _, n := range []string{p.NSName, p.OutsideName} {
		if err := DeleteNamedNS(n); err != nil {
			errs = append(errs, err)
		}
	}
	if p.ResolvConf != "" {
		if err := os.Remove(p.ResolvConf); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Forward says where a declared guest port is reachable from outside.
type Forward struct {
	Iface    string // VMI interface
	Protocol string // TCP or UDP
	Port     uint16
	Address  string // host:port on the pod address, e.g. 192.168.66.2:80
}

// Forwards lists the declared ports of masquerade and passt interfaces at
// the pod address. One without ports forwards every port; it is reported
// once with Port 0 and Address "<pod address>:*".
func (p *Pod) Forwards(ifaces []plan.Iface) []Forward {
	var out []Forward
	for _, it := range ifaces {
		if it.Binding != plan.BindingMasquerade && it.Binding != plan.BindingPasst {
			continue
		}
		if len(it.Ports) == 0 {
			out = append(out, Forward{Iface: it.Name, Protocol: "TCP+UDP", Address: p.Pod4.Addr().String() + ":*"})
			continue
		}
		for _, pt := range it.Ports {
			out = append(out, Forward{Iface: it.Name, Protocol: pt.Protocol, Port: pt.Port,
				Address: netip.AddrPortFrom(p.Pod4.Addr(), pt.Port).String()})
		}
	}
	return out
}

// NewNamedNS creates a network namespace pinned at /run/netns/<name> and
// returns a handle to it; the calling goroutine's thread never changes
// namespace (the creation happens on a thread of its own).
func NewNamedNS(name string) (netns.NsHandle, error) {
	if err := sharedNetnsDir(); err != nil {
		return netns.None(), err
	}
	type res struct {
		h   netns.NsHandle
		err error
	}
	c := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			c <- res{err: fmt.Errorf("get netns: %w", err)}
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(name) // switches this thread to the new ns
		if rerr := netns.Set(orig); rerr != nil {
			if err == nil {
				h.Close()
			}
			c <- res{err: fmt.Errorf("return to original netns: %w", rerr)}
			return // thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("create netns %s: %w", name, err)
		}
		c <- res{h, err}
	}()
	r := <-c
	return r.h, r.err
}

// sharedNetnsDir makes /run/netns a shared bind mount of itself before any
// namespace is pinned there, as iproute2 does. Otherwise a later `ip netns
// add` by anyone makes that bind mount over our pins, hiding them: they can
// then be neither unmounted nor removed.
func sharedNetnsDir() error {
	const dir = "/run/netns"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	mounted, err := isMountPoint(dir)
	if err != nil {
		return err
	}
	if !mounted {
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir is the mount point of a mount in this
// mount namespace.
func isMountPoint(dir string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			return true, nil
		}
	}
	return false, nil
}

// DeleteNamedNS removes /run/netns/<name>; missing is fine.
func DeleteNamedNS(name string) error {
	if name == "" {
		return nil
	}
	p := filepath.Join("/run/netns", name)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// AddInterface adds a secondary pod interface, as Multus would: a veth
// named podIface in the pod namespace (address pod4, no default route)
// whose peer "ext<n>" in the outside namespace has outside4.
func (p *Pod) AddInterface(podIface string, pod4, outside4 netip.Prefix) error {
	p.extra++
	ext := fmt.Sprintf("ext%d", p.extra)
	err := plan.InNS(p.Outside, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ext, MTU: p.MTU}, PeerName: podIface}
		veth.PeerNamespace = netlink.NsFd(p.NS)
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("create veth %s: %w", podIface, err)
		}
		return configure(ext, outside4, netip.Prefix{}, netip.Addr{}, netip.Addr{})
	})
	if err != nil {
		return err
	}
	return plan.InNS(p.NS, func() error {
		return configure(podIface, pod4, netip.Prefix{}, netip.Addr{}, netip.Addr{})
	})
}

// RemoveInterface removes a secondary pod interface AddInterface added
// (the veth: its outside end goes with it). A missing one is fine.
func (p *Pod) RemoveInterface(podIface string) error {
	return plan.InNS(p.NS, func() error {
		l, err := netlink.LinkByName(podIface)
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pod interface %s: %w", podIface, err)
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("remove pod interface %s: %w", podIface, err)
		}
		return nil
	})
}
