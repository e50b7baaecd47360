// Package dhcp is the unprivileged phase of the network setup (the
// launcher's part): it reads the vif caches the privileged phase
// (internal/netsetup) wrote and serves DHCPv4/DHCPv6 on each bridge, so the
// guest learns its address, routes and DNS; a passt interface gets its
// passt instead (passt.go). It is its own package so that
// the launcher links none of the privileged phase's nftables code.
package dhcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/insomniacslk/dhcp/rfc1035label"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// InfiniteLease is the lease KubeVirt hands out: long enough that the guest
// never has to renew while the VM lives.
const InfiniteLease = 999 * 24 * time.Hour

// Config configures the unprivileged phase.
type Config struct {
	// CacheDir is the private dir the privileged phase wrote the caches to.
	CacheDir string
	// ResolvConf is the pod's resolver configuration ("" = /etc/resolv.conf).
	ResolvConf string
	// NetNS, when set, is the pod namespace the servers' sockets are
	// opened in; zero means the current one (the launcher runs in the pod).
	NetNS netns.NsHandle
	Plan  plan.PlanOptions
	// Passt is the passt binary ("" = passt on the PATH); PasstLog the
	// file passt logs to (the share dir's passt.log, where virt-handler
	// reads it; "" = no log).
	Passt, PasstLog string
}

// DNSConfig is what the guest learns about name resolution.
type DNSConfig struct {
	Servers4, Servers6 []net.IP
	Search             []string
}

// ParseResolvConf reads nameserver and search (or domain) lines.
func ParseResolvConf(b []byte) DNSConfig {
	var c DNSConfig
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			ip := net.ParseIP(f[1])
			if ip == nil {
				continue
			}
			if ip4 := ip.To4(); ip4 != nil {
				c.Servers4 = append(c.Servers4, ip4)
			} else {
				c.Servers6 = append(c.Servers6, ip)
			}
		case "search", "domain": // the last one wins, as in the resolver
			c.Search = append([]string(nil), f[1:]...)
		}
	}
	return c
}

// GuestHostname is spec.hostname, else the VMI name, cut to a DNS label.
func GuestHostname(vmi *v1.VirtualMachineInstance) string {
	h := vmi.Spec.Hostname
	if h == "" {
		h = vmi.Name
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// searchDomains puts <subdomain>.<ns>.svc.<cluster> first when the VMI has
// a subdomain, so the guest's FQDN resolves like a pod's in a headless
// service.
func searchDomains(vmi *v1.VirtualMachineInstance, search []string) []string {
	sub := vmi.Spec.Subdomain
	if sub == "" {
		return search
	}
	prefix := vmi.Namespace + ".svc."
	for _, d := range search {
		if vmi.Namespace != "" && strings.HasPrefix(d, prefix) {
			return append([]string{sub + "." + d}, search...)
		}
	}
	return search
}

// Lease4 is the complete DHCPv4 answer for one guest.
type Lease4 struct {
	// ClientMAC is the only client answered; nil answers any (anyClient).
	ClientMAC net.HardwareAddr
	Addr      net.IPNet
	Router    net.IP // nil: no router option
	ServerID  net.IP
	DNS       []net.IP
	Search    []string
	Hostname  string
	MTU       uint16
	// Routes are classless static routes (option 121); when present they
	// include the default route, since clients then ignore option 3.
	Routes    []*dhcpv4.Route
	LeaseTime time.Duration
	// Custom are the interface's dhcpOptions (customOptions4).
	Custom []dhcpv4.Option
}

// anyClient says whether the DHCP server of an interface bound so answers
// any client rather than only the guest's MAC, as KubeVirt's launcher
// does: a masquerade interface's server has no MAC to hold to. Its guest
// keeps the MAC its first pod gave it (that pod's interface's, unless the
// VMI names one) through every migration, while each target pod's
// interface has a MAC of its own; and the bridge it serves is the pod's
// own, with the guest the only client on it. A bridge binding's guest
// keeps the MAC virt-handler chose (the VMI's status), so its server holds
// to it.
func anyClient(binding string) bool { return binding == plan.BindingMasquerade }

// lease4From turns a vif cache into the guest's lease.
func lease4From(c *plan.VifCache, dns DNSConfig, hostname string, search []string) (Lease4, error) {
	if c.IP.IPNet == nil || c.IP.IP.To4() == nil {
		return Lease4{}, fmt.Errorf("vif cache of %s: no IPv4 address", c.Name)
	}
	if len(c.MAC) != 6 {
		return Lease4{}, fmt.Errorf("vif cache of %s: no guest MAC", c.Name)
	}
	l := Lease4{
		ClientMAC: c.MAC,
		Addr:      net.IPNet{IP: c.IP.IP.To4(), Mask: c.IP.Mask},
		ServerID:  c.AdvertisingIPAddr.To4(),
		DNS:       dns.Servers4,
		Search:    search,
		Hostname:  hostname,
		MTU:       c.Mtu,
		LeaseTime: InfiniteLease,
	}
	if c.Gateway != nil {
		l.Router = c.Gateway.To4()
	}
	if l.ServerID == nil {
		return Lease4{}, fmt.Errorf("vif cache of %s: no DHCP server address", c.Name)
	}
	if c.Routes != nil {
		l.Routes = classlessRoutes(*c.Routes)
	}
	return l, nil
}

// classlessRoutes keeps the gateway routes of the pod interface (the
// connected subnet comes with the mask). Only when some route other than the
// default one exists is option 121 worth sending.
func classlessRoutes(routes []netlink.Route) []*dhcpv4.Route {
	var out []*dhcpv4.Route
	extra := false
	for _, r := range routes {
		if r.Gw == nil || r.Gw.To4() == nil {
			continue
		}
		dst := r.Dst
		if dst == nil {
			dst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
		}
		if ones, _ := dst.Mask.Size(); ones != 0 {
			extra = true
		}
		out = append(out, &dhcpv4.Route{Dest: &net.IPNet{IP: dst.IP.To4(), Mask: dst.Mask}, Router: r.Gw.To4()})
	}
	if !extra {
		return nil
	}
	return out
}

// Options4 are the options every answer to this guest carries.
func (l Lease4) Options4() []dhcpv4.Option {
	opts := []dhcpv4.Option{
		dhcpv4.OptServerIdentifier(l.ServerID),
		dhcpv4.OptSubnetMask(l.Addr.Mask),
		dhcpv4.OptIPAddressLeaseTime(l.LeaseTime),
	}
	if l.Router != nil {
		opts = append(opts, dhcpv4.OptRouter(l.Router))
	}
	if len(l.DNS) > 0 {
		opts = append(opts, dhcpv4.OptDNS(l.DNS...))
	}
	if len(l.Search) > 0 {
		opts = append(opts, dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: l.Search}))
		opts = append(opts, dhcpv4.OptDomainName(l.Search[0]))
	}
	if l.Hostname != "" {
		opts = append(opts, dhcpv4.OptHostName(l.Hostname))
	}
	if l.MTU != 0 {
		mtu := make([]byte, 2)
		binary.BigEndian.PutUint16(mtu, l.MTU)
		opts = append(opts, dhcpv4.OptGeneric(dhcpv4.OptionInterfaceMTU, mtu))
	}
	if len(l.Routes) > 0 {
		opts = append(opts, dhcpv4.OptClasslessStaticRoute(l.Routes...))
	}
	return append(opts, l.Custom...)
}

// customOptions4 are an interface's dhcpOptions as KubeVirt's DHCP server
// sends them (pkg/network/dhcp/server): the TFTP server name in option 66
// and the boot file name in option 67, both as text (not in the header's
// sname and file fields), the NTP servers as IPv4 addresses in option 42,
// and each private option (224-254) with its value's bytes as given. The
// VMI's validation refuses what this refuses; field names the interface.
func customOptions4(o *v1.DHCPOptions, field string) ([]dhcpv4.Option, error) {
	if o == nil {
		return nil, nil
	}
	var opts []dhcpv4.Option
	if o.TFTPServerName != "" {
		opts = append(opts, dhcpv4.OptTFTPServerName(o.TFTPServerName))
	}
	if o.BootFileName != "" {
		opts = append(opts, dhcpv4.OptBootFileName(o.BootFileName))
	}
	if len(o.NTPServers) > 0 {
		ntp := make([]net.IP, 0, len(o.NTPServers))
		for i, s := range o.NTPServers {
			ip := net.ParseIP(s).To4()
			if ip == nil {
				return nil, fmt.Errorf("%s.dhcpOptions.ntpServers[%d]: %q is not an IPv4 address", field, i, s)
			}
			ntp = append(ntp, ip)
		}
		opts = append(opts, dhcpv4.OptNTPServers(ntp...))
	}
	seen := map[int]bool{}
	for i, p := range o.PrivateOptions {
		if p.Option < 224 || p.Option > 254 {
			return nil, fmt.Errorf("%s.dhcpOptions.privateOptions[%d].option: %d is not in the private range 224-254", field, i, p.Option)
		}
		if seen[p.Option] {
			return nil, fmt.Errorf("%s.dhcpOptions.privateOptions[%d].option: %d is given twice", field, i, p.Option)
		}
		seen[p.Option] = true
		opts = append(opts, dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(p.Option), []byte(p.Value)))
	}
	return opts, nil
}

// Reply4 answers one request, or returns nil when the request is not for
// this guest or needs no answer.
func (l Lease4) Reply4(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || (l.ClientMAC != nil && !bytes.Equal(req.ClientHWAddr, l.ClientMAC)) {
		return nil, nil
	}
	var typ dhcpv4.MessageType
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		want := req.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = req.ClientIPAddr
		}
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(l.ServerID) {
			return nil, nil // the client chose another server
		}
		typ = dhcpv4.MessageTypeAck
		if !want.Equal(l.Addr.IP) {
			typ = dhcpv4.MessageTypeNak
		}
	default:
		return nil, nil
	}
	mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(typ)}
	if typ == dhcpv4.MessageTypeNak {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(l.ServerID)))
	} else {
		mods = append(mods, dhcpv4.WithYourIP(l.Addr.IP))
		for _, o := range l.Options4() {
			mods = append(mods, dhcpv4.WithOption(o))
		}
	}
	resp, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil, fmt.Errorf("build DHCP %s: %w", typ, err)
	}
	return resp, nil
}

// Lease6 is the DHCPv6 answer for one guest (masquerade, dual stack).
type Lease6 struct {
	Addr     net.IP
	ServerID dhcpv6.DUID
	DNS      []net.IP
	Search   []string
}

// Reply6 answers Solicit, Request, Renew, Rebind and Confirm; others get nil.
func (l Lease6) Reply6(msg *dhcpv6.Message) (*dhcpv6.Message, error) {
	iana := msg.Options.OneIANA()
	var iaid [4]byte
	if iana != nil {
		iaid = iana.IaId
	}
	mods := []dhcpv6.Modifier{
		dhcpv6.WithServerID(l.ServerID),
		dhcpv6.WithIAID(iaid),
		dhcpv6.WithIANA(dhcpv6.OptIAAddress{IPv6Addr: l.Addr, PreferredLifetime: InfiniteLease, ValidLifetime: InfiniteLease}),
	}
	if len(l.DNS) > 0 {
		mods = append(mods, dhcpv6.WithDNS(l.DNS...))
	}
	if len(l.Search) > 0 {
		mods = append(mods, dhcpv6.WithDomainSearchList(l.Search...))
	}
	var (
		resp *dhcpv6.Message
		err  error
	)
	switch msg.MessageType {
	case dhcpv6.MessageTypeSolicit:
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			resp, err = dhcpv6.NewReplyFromMessage(msg, append(mods, dhcpv6.WithRapidCommit)...)
		} else {
			resp, err = dhcpv6.NewAdvertiseFromSolicit(msg, mods...)
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeConfirm:
		resp, err = dhcpv6.NewReplyFromMessage(msg, mods...)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build DHCPv6 reply to %s: %w", msg.MessageType, err)
	}
	return resp, nil
}

// Start starts the DHCP servers of every masquerade/bridge interface of
// the VMI (Servers.Serve on new Servers) and returns, per VMI interface
// name, the facts the converter needs, and stop, which closes every server.
func Start(ctx context.Context, vmi *v1.VirtualMachineInstance, cfg Config, log *slog.Logger) (map[string]facts.Interface, func() error, error) {
	s := New(cfg, log)
	out, err := s.Serve(ctx, vmi, nil)
	if err != nil {
		return nil, nil, err
	}
	return out, s.Close, nil
}

// Servers are the DHCP servers of one VMI's interfaces, each started and
// stopped on its own: all of them at the first Sync, one more for an
// interface hotplugged later, one fewer after an unplug. They only read the
// vif caches, so they run unprivileged (binding ports 67/547 needs
// CAP_NET_BIND_SERVICE). Safe for concurrent use.
type Servers struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	running map[string]served // by VMI interface name
	closed  bool
}

// served is one interface's facts and what stops its servers.
type served struct {
	facts   facts.Interface
	closers []func() error
}

// New makes an empty set of servers.
func New(cfg Config, log *slog.Logger) *Servers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Servers{cfg: cfg, log: log, running: map[string]served{}}
}

// Serve starts the servers of the VMI's masquerade and bridge interfaces
// (DHCP), passt interfaces (a passt each, passt.go) and binding plugins'
// tap interfaces (their facts only, plugin.go); attach is virt-handler's
// InterfaceDomainAttachment
// named in names (every one when names is empty) that have none yet, and
// returns the facts of each interface it serves, old and new. On error it
// stops what this call started, and only that.
func (s *Servers) Serve(ctx context.Context, vmi *v1.VirtualMachineInstance, attach map[string]string, names ...string) (map[string]facts.Interface, error) {
	opts := s.cfg.Plan
	opts.DomainAttachments = attach
	ifaces, err := plan.PlanFor(vmi, opts)
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("DHCP servers: closed")
	}
	// The pod's resolvers, read once per call for the interfaces it starts.
	var dns *DNSConfig
	resolvers := func() (DNSConfig, error) {
		if dns == nil {
			d, err := s.resolvers()
			if err != nil {
				return DNSConfig{}, err
			}
			dns = &d
		}
		return *dns, nil
	}
	var started []string
	undo := func(err error) error {
		var errs []error
		for _, n := range started {
			errs = append(errs, s.stopLocked(n))
		}
		return errors.Join(append([]error{err}, errs...)...)
	}
	for _, it := range ifaces {
		if _, ok := s.running[it.Name]; ok || (len(names) > 0 && !wanted[it.Name]) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, undo(err)
		}
		var sv served
		var err error
		switch it.Binding {
		case plan.BindingPasst:
			sv, err = s.startPasst(ctx, vmi, it, resolvers)
		case plan.BindingPluginTap:
			sv, err = s.pluginTap(it)
		default:
			sv, err = s.start(vmi, it, resolvers)
		}
		if err != nil {
			return nil, undo(fmt.Errorf("interface %s: %w", it.Name, err))
		}
		s.running[it.Name] = sv
		started = append(started, it.Name)
	}
	for _, n := range names {
		if _, ok := s.running[n]; !ok {
			return nil, undo(fmt.Errorf("interface %s: not a masquerade or bridge interface of the VMI", n))
		}
	}
	out := make(map[string]facts.Interface, len(s.running))
	for n, sv := range s.running {
		out[n] = sv.facts
	}
	return out, nil
}

// start reads one interface's cache and starts its servers; resolvers
// gives the pod's resolvers.
func (s *Servers) start(vmi *v1.VirtualMachineInstance, it plan.Iface, resolvers func() (DNSConfig, error)) (served, error) {
	c, err := vifConfig(s.cfg, it)
	if err != nil {
		return served{}, err
	}
	sv := served{facts: facts.Interface{MAC: c.MAC.String(), MTU: uint(c.Mtu), Tap: it.Tap}}
	if c.IPAMDisabled {
		s.log.Info("no IPv4 on the pod interface: DHCP off", "iface", it.Name)
		return sv, nil
	}
	dns, err := resolvers()
	if err != nil {
		return served{}, err
	}
	search := searchDomains(vmi, dns.Search)
	l4, err := lease4From(c, dns, GuestHostname(vmi), search)
	if err != nil {
		return served{}, err
	}
	if anyClient(it.Binding) {
		l4.ClientMAC = nil
	}
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Name == it.Name {
			field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
			if l4.Custom, err = customOptions4(iface.DHCPOptions, field); err != nil {
				return served{}, err
			}
		}
	}
	var l6 *Lease6
	if c.IPv6.IPNet != nil && c.AdvertisingIPv6Addr != nil {
		l6 = &Lease6{Addr: c.IPv6.IP, DNS: dns.Servers6, Search: search}
	}
	sv.closers, err = serve(s.cfg.NetNS, it, l4, l6, s.log.With("iface", it.Name, "bridge", it.Bridge))
	if err != nil {
		return served{}, err
	}
	return sv, nil
}

// resolvers reads the pod's resolver configuration (a missing file is
// none).
func (s *Servers) resolvers() (DNSConfig, error) {
	rc := s.cfg.ResolvConf
	if rc == "" {
		rc = "/etc/resolv.conf"
	}
	b, err := os.ReadFile(rc)
	switch {
	case err == nil:
		return ParseResolvConf(b), nil
	case errors.Is(err, os.ErrNotExist):
		return DNSConfig{}, nil
	default:
		return DNSConfig{}, fmt.Errorf("read %s: %w", rc, err)
	}
}

// Stop stops the servers of the named interface (an unplugged one); an
// interface without servers is fine.
func (s *Servers) Stop(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(name)
}

func (s *Servers) stopLocked(name string) error {
	sv, ok := s.running[name]
	if !ok {
		return nil
	}
	delete(s.running, name)
	var errs []error
	for i := len(sv.closers) - 1; i >= 0; i-- {
		errs = append(errs, sv.closers[i]())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop DHCP of interface %s: %w", name, err)
	}
	s.log.Info("DHCP stopped", "iface", name)
	return nil
}

// Close stops every server; Serve fails after it. A second Close does
// nothing.
func (s *Servers) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	for n := range s.running {
		errs = append(errs, s.stopLocked(n))
	}
	return errors.Join(errs...)
}

// serve opens the sockets inside ns (sockets keep their namespace) and runs
// the servers on ordinary goroutines.
func serve(ns netns.NsHandle, it plan.Iface, l4 Lease4, l6 *Lease6, log *slog.Logger) ([]func() error, error) {
	var s4 *server4.Server
	var s6 *server6.Server
	err := plan.InNS(ns, func() error {
		br, err := netlink.LinkByName(it.Bridge)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", it.Bridge, err)
		}
		h4 := func(conn net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
			resp, err := l4.Reply4(req)
			if err != nil {
				log.Warn("DHCPv4 reply", "err", err)
				return
			}
			if resp == nil {
				return
			}
			if _, err := conn.WriteTo(resp.ToBytes(), peer); err != nil {
				log.Warn("DHCPv4 send", "peer", peer, "err", err)
				return
			}
			log.Info("DHCPv4", "type", resp.MessageType().String(), "addr", l4.Addr.String(), "mac", req.ClientHWAddr.String())
		}
		s4, err = server4.NewServer(it.Bridge, &net.UDPAddr{IP: net.IPv4zero, Port: dhcpv4.ServerPort}, h4)
		if err != nil {
			return fmt.Errorf("DHCPv4 server on %s: %w", it.Bridge, err)
		}
		if l6 == nil {
			return nil
		}
		l6.ServerID = &dhcpv6.DUIDLL{HWType: 1, LinkLayerAddr: br.Attrs().HardwareAddr}
		lease6 := *l6
		brIndex := br.Attrs().Index
		h6 := func(conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6) {
			msg, ok := m.(*dhcpv6.Message)
			if !ok {
				return // relayed messages cannot reach a bridge-local server
			}
			resp, err := lease6.Reply6(msg)
			if err != nil {
				log.Warn("DHCPv6 reply", "err", err)
				return
			}
			if resp == nil {
				return
			}
			// Go maps zone names to indexes through a process-wide cache that
			// does not know about namespaces; the bridge's index is exact.
			if up, ok := peer.(*net.UDPAddr); ok {
				p := *up
				p.Zone = strconv.Itoa(brIndex)
				peer = &p
			}
			if _, err := conn.WriteTo(resp.ToBytes(), peer); err != nil {
				log.Warn("DHCPv6 send", "peer", peer, "err", err)
				return
			}
			log.Info("DHCPv6", "type", resp.MessageType.String(), "addr", lease6.Addr.String())
		}
		s6, err = server6.NewServer(it.Bridge, nil, h6)
		if err != nil {
			s4.Close()
			return fmt.Errorf("DHCPv6 server on %s: %w", it.Bridge, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	go s4.Serve() // returns once closed
	closers := []func() error{s4.Close}
	if s6 != nil {
		go s6.Serve()
		closers = append(closers, s6.Close)
	}
	return closers, nil
}

// vifConfig is the interface's cache, completed from the links in the pod
// the way KubeVirt's launcher completes it: virt-handler writes a cache for
// the bridge binding only and leaves the MAC (and may leave the MTU) out;
// for masquerade the launcher derives everything from the VM subnet and the
// links, so a missing cache is fine there.
func vifConfig(cfg Config, it plan.Iface) (*plan.VifCache, error) {
	c, err := plan.ReadVifCache(cfg.CacheDir, it.PodIface)
	if err != nil && !(errors.Is(err, os.ErrNotExist) && it.Binding == plan.BindingMasquerade) {
		return nil, fmt.Errorf("%w (privileged phase not run?)", err)
	}
	err = plan.InNS(cfg.NetNS, func() error {
		pod, err := netlink.LinkByName(it.PodIface)
		if err != nil {
			return fmt.Errorf("pod interface %s: %w", it.PodIface, err)
		}
		if c == nil {
			c = &plan.VifCache{
				Name:              it.PodIface,
				IP:                netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(it.Guest4(), it.VMNetwork4.Bits()))},
				AdvertisingIPAddr: net.IP(it.Gateway4().AsSlice()),
				Gateway:           net.IP(it.Gateway4().AsSlice()),
			}
			// IPv6 only where the handler gave the bridge the v6 gateway.
			if br, err := netlink.LinkByName(it.Bridge); err == nil {
				if addrs, err := netlink.AddrList(br, netlink.FAMILY_V6); err == nil {
					for _, a := range addrs {
						if a.IP.Equal(net.IP(it.Gateway6().AsSlice())) {
							c.IPv6 = netlink.Addr{IPNet: plan.IPNet(netip.PrefixFrom(it.Guest6(), it.VMNetwork6.Bits()))}
							c.AdvertisingIPv6Addr = a.IP
						}
					}
				}
			}
		}
		if len(c.MAC) == 0 {
			c.MAC = it.MAC
			if c.MAC == nil {
				c.MAC = pod.Attrs().HardwareAddr
			}
		}
		if c.Mtu == 0 {
			c.Mtu = uint16(pod.Attrs().MTU)
		}
		return nil
	})
	return c, err
}
