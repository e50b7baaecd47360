// Package plan is what both phases of the network setup share: the plan of a
// VMI's masquerade, bridge and passt interfaces (pod interface, bridge and tap names,
// VM subnets, as KubeVirt derives them), the vif cache the privileged phase
// writes for the unprivileged one, and InNS. It links no nftables code, so
// the launcher (which only runs the unprivileged phase, internal/netsetup/dhcp)
// does not carry the privileged phase in its binary.
package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"

	v1 "kubevirt.io/api/core/v1"
)

// Bindings this package implements.
const (
	BindingMasquerade = "masquerade"
	BindingBridge     = "bridge"
	// BindingPasst is KubeVirt's core passt binding: the pod interface
	// stays as it is (no bridge, no tap); passt, which libvirt starts for
	// the domain, serves the guest from the pod's own sockets.
	BindingPasst = "passt"
	// BindingPluginTap is a network binding plugin interface whose
	// plugin's domainAttachmentType is tap (managedTap reaches the
	// launcher as tap): the domain gets a tap interface on the tap the
	// plugin's CNI (or, for managedTap, virt-handler) made, or on the pod
	// interface when there is none. A plugin without an attachment type
	// is not planned: its sidecar adds the interface to the domain.
	BindingPluginTap = "plugin-tap"
)

// Default VM subnets of the masquerade binding (KubeVirt's defaults).
var (
	DefaultVMNetwork4 = netip.MustParsePrefix("10.0.2.0/24")
	DefaultVMNetwork6 = netip.MustParsePrefix("fd10:0:2::/120")
)

// Port is one declared guest port of a masquerade interface.
type Port struct {
	Protocol string // "TCP" or "UDP"
	Port     uint16
}

// Iface is the plan for one VMI interface: which pod interface it is wired
// to and every device name derived from it, as KubeVirt derives them.
type Iface struct {
	Name     string // VMI interface name (spec.domain.devices.interfaces[].name)
	Network  string // VMI network name
	Index    int    // position in spec.domain.devices.interfaces
	Binding  string // BindingMasquerade, BindingBridge or BindingPasst
	PodIface string // eth0 for the pod network; pod<hash> or netN for Multus
	Bridge   string // k6t-<podIface without "pod">; empty for passt
	Tap      string // tap0, tap<hash>, tapN; empty for passt
	// NIC is the name the pod interface is renamed to when the bridge
	// binding enslaves it (eth0-nic); a dummy keeps the original name.
	NIC string
	// MAC is the spec's macAddress, nil when it gives none.
	MAC   net.HardwareAddr
	Ports []Port // masquerade and passt; empty means every port
	// VMNetwork4/6 are the masquerade VM subnets (gateway .1, guest .2).
	VMNetwork4, VMNetwork6 netip.Prefix
	// Queues > 1 makes the tap multi-queue (networkInterfaceMultiqueue).
	Queues int
}

// Gateway4 and Guest4 (and the v6 pair) are the first and second host
// addresses of the masquerade subnet.
func (i Iface) Gateway4() netip.Addr { return i.VMNetwork4.Masked().Addr().Next() }
func (i Iface) Guest4() netip.Addr   { return i.Gateway4().Next() }
func (i Iface) Gateway6() netip.Addr { return i.VMNetwork6.Masked().Addr().Next() }
func (i Iface) Guest6() netip.Addr   { return i.Gateway6().Next() }

// PlanOptions changes how pod interface names are chosen.
type PlanOptions struct {
	// OrdinalNames names secondary pod interfaces net1, net2, ... (KubeVirt's
	// legacy scheme) instead of pod<hash>.
	OrdinalNames bool
	// DomainAttachments is virt-handler's InterfaceDomainAttachment: the
	// domain attachment type ("tap") by VMI interface name.
	DomainAttachments map[string]string
}

// HashedPodIfaceName is KubeVirt's pod interface name for a secondary
// network: "pod" and the first 11 hex digits of sha256(network name).
func HashedPodIfaceName(network string) string {
	sum := sha256.Sum256([]byte(network))
	return "pod" + hex.EncodeToString(sum[:])[:11]
}

// TapName is "tap" + the pod interface name minus its first three
// characters: eth0 -> tap0, net1 -> tap1, pod<hash> -> tap<hash>.
func TapName(podIface string) string { return "tap" + podIface[3:] }

// BridgeName is "k6t-" + the pod interface name without a "pod" prefix.
func BridgeName(podIface string) string { return "k6t-" + strings.TrimPrefix(podIface, "pod") }

// NICName is the name a bridged pod interface is renamed to.
func NICName(podIface string) string { return strings.TrimPrefix(podIface, "pod") + "-nic" }

// PlanFor validates the VMI's interfaces and returns one Iface per
// masquerade, bridge or passt interface and per binding plugin interface
// attached as a tap (opts.DomainAttachments), in spec order. Interfaces
// with state absent, and plugin interfaces left to their sidecars, are
// skipped. Any other binding is refused with an error naming the field:
// nothing in this package can wire it.
func PlanFor(vmi *v1.VirtualMachineInstance, opts PlanOptions) ([]Iface, error) {
	if vmi == nil {
		return nil, fmt.Errorf("vmi: missing")
	}
	spec := &vmi.Spec
	networks := map[string]*v1.Network{}
	for i := range spec.Networks {
		n := &spec.Networks[i]
		if _, dup := networks[n.Name]; dup {
			return nil, fmt.Errorf("spec.networks[%d].name: %q repeated", i, n.Name)
		}
		networks[n.Name] = n
	}
	queues := 0
	if mq := spec.Domain.Devices.NetworkInterfaceMultiQueue; mq != nil && *mq {
		queues = vcpus(vmi)
	}

	var out []Iface
	seenPod := map[string]string{}
	ordinal := 0
	for i, in := range spec.Domain.Devices.Interfaces {
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		if in.State == v1.InterfaceStateAbsent {
			continue
		}
		nw := networks[in.Name]
		if nw == nil {
			return nil, fmt.Errorf("%s.name: no network named %q in spec.networks", field, in.Name)
		}
		it := Iface{Name: in.Name, Network: nw.Name, Index: i}
		switch {
		case in.Masquerade != nil:
			it.Binding = BindingMasquerade
		case in.Bridge != nil:
			it.Binding = BindingBridge
		case in.SRIOV != nil:
			return nil, fmt.Errorf("%s.sriov: binding not supported by this launcher", field)
		case in.Binding != nil:
			// Without a tap attachment the plugin's sidecar makes the
			// domain's interface: left unplanned below, once the secondary
			// networks' ordinal has counted it.
			if opts.DomainAttachments[in.Name] == "tap" {
				it.Binding = BindingPluginTap
			}
		case in.PasstBinding != nil:
			it.Binding = BindingPasst
		case in.DeprecatedPasst != nil:
			return nil, fmt.Errorf("%s.passt: binding removed in KubeVirt v1.3 and not supported (passtBinding is its successor)", field)
		case in.DeprecatedSlirp != nil:
			return nil, fmt.Errorf("%s.slirp: binding removed in KubeVirt v1.3 and not supported", field)
		case in.DeprecatedMacvtap != nil:
			return nil, fmt.Errorf("%s.macvtap: binding removed in KubeVirt v1.3 and not supported", field)
		default:
			return nil, fmt.Errorf("%s: no binding method (masquerade or bridge) given", field)
		}

		switch {
		case nw.Pod != nil, nw.Multus != nil && nw.Multus.Default:
			it.PodIface = "eth0"
		case nw.Multus != nil:
			ordinal++
			if opts.OrdinalNames {
				it.PodIface = fmt.Sprintf("net%d", ordinal)
			} else {
				it.PodIface = HashedPodIfaceName(nw.Name)
			}
		default:
			return nil, fmt.Errorf("spec.networks[%q]: neither pod nor multus network", nw.Name)
		}
		if it.Binding == "" {
			continue
		}
		if it.Binding == BindingPasst {
			// KubeVirt's webhook refuses passt on any other network.
			if nw.Pod == nil {
				return nil, fmt.Errorf("%s.passtBinding: allowed only on the pod network, network %q is not", field, nw.Name)
			}
			it.PodIface = PasstPodIface(vmi, it.Name)
		}
		if other, dup := seenPod[it.PodIface]; dup {
			return nil, fmt.Errorf("%s: pod interface %s already used by interface %q", field, it.PodIface, other)
		}
		seenPod[it.PodIface] = it.Name
		if it.Binding != BindingPasst {
			it.Bridge, it.Tap, it.NIC = BridgeName(it.PodIface), TapName(it.PodIface), NICName(it.PodIface)
		}

		if in.MacAddress != "" {
			mac, err := net.ParseMAC(in.MacAddress)
			if err != nil || len(mac) != 6 {
				return nil, fmt.Errorf("%s.macAddress: %q is not a 48-bit MAC address", field, in.MacAddress)
			}
			if mac[0]&1 == 1 {
				return nil, fmt.Errorf("%s.macAddress: %q is a multicast address", field, in.MacAddress)
			}
			it.MAC = mac
		}
		switch it.Binding {
		case BindingPluginTap:
			it.Bridge, it.NIC = "", ""
		case BindingMasquerade:
			if nw.Pod == nil {
				return nil, fmt.Errorf("%s.masquerade: allowed only on the pod network, network %q is not", field, nw.Name)
			}
			var err error
			if it.VMNetwork4, it.VMNetwork6, err = vmNetworks(nw); err != nil {
				return nil, err
			}
			if it.Ports, err = ParsePorts(field, in.Ports); err != nil {
				return nil, err
			}
		case BindingPasst:
			var err error
			if it.Ports, err = ParsePorts(field, in.Ports); err != nil {
				return nil, err
			}
		default:
			if len(in.Ports) > 0 {
				return nil, fmt.Errorf("%s.ports: only the masquerade and passt bindings forward ports", field)
			}
		}
		if queues > 1 && it.Binding != BindingPasst && (in.Model == "" || in.Model == "virtio") {
			it.Queues = queues
		}
		out = append(out, it)
	}
	return out, nil
}

// ParsePorts checks an interface's declared ports (field names it in errors):
// TCP (the default) or UDP, 1-65535, none twice.
func ParsePorts(field string, in []v1.Port) ([]Port, error) {
	var out []Port
	seen := map[Port]int{}
	for j, p := range in {
		pf := fmt.Sprintf("%s.ports[%d]", field, j)
		proto := strings.ToUpper(p.Protocol)
		if proto == "" {
			proto = "TCP"
		}
		if proto != "TCP" && proto != "UDP" {
			return nil, fmt.Errorf("%s.protocol: %q is not TCP or UDP", pf, p.Protocol)
		}
		if p.Port < 1 || p.Port > 65535 {
			return nil, fmt.Errorf("%s.port: %d out of range 1-65535", pf, p.Port)
		}
		pp := Port{Protocol: proto, Port: uint16(p.Port)}
		if k, dup := seen[pp]; dup {
			return nil, fmt.Errorf("%s: %s/%d repeats ports[%d]", pf, proto, p.Port, k)
		}
		seen[pp] = j
		out = append(out, pp)
	}
	return out, nil
}

func vmNetworks(n *v1.Network) (netip.Prefix, netip.Prefix, error) {
	v4, v6 := DefaultVMNetwork4, DefaultVMNetwork6
	field := fmt.Sprintf("spec.networks[%q].pod", n.Name)
	if s := n.Pod.VMNetworkCIDR; s != "" {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return v4, v6, fmt.Errorf("%s.vmNetworkCIDR: %q is not an IPv4 CIDR", field, s)
		}
		// network, gateway, guest and broadcast need four addresses.
		if p.Bits() > 30 {
			return v4, v6, fmt.Errorf("%s.vmNetworkCIDR: %q is too small, need at least /30", field, s)
		}
		v4 = p.Masked()
	}
	if s := n.Pod.VMIPv6NetworkCIDR; s != "" {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() {
			return v4, v6, fmt.Errorf("%s.vmIPv6NetworkCIDR: %q is not an IPv6 CIDR", field, s)
		}
		if p.Bits() > 126 {
			return v4, v6, fmt.Errorf("%s.vmIPv6NetworkCIDR: %q is too small, need at least /126", field, s)
		}
		v6 = p.Masked()
	}
	return v4, v6, nil
}

// vcpus is sockets*cores*threads (at least 1), capped at 256 as KubeVirt
// caps tap queues.
func vcpus(vmi *v1.VirtualMachineInstance) int {
	n := 1
	if c := vmi.Spec.Domain.CPU; c != nil {
		s, co, t := int(c.Sockets), int(c.Cores), int(c.Threads)
		if s == 0 {
			s = 1
		}
		if co == 0 {
			co = 1
		}
		if t == 0 {
			t = 1
		}
		n = s * co * t
	}
	if n > 256 {
		n = 256
	}
	return n
}
