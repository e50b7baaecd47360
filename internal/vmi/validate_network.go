package vmi

import (
	"net"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"
)

// Checks of networks and interfaces.

func (v *validator) networks() {
	const p = "spec.networks"
	nets := v.spec.Networks
	if len(nets) > maxItems {
		v.fail(p, "%d networks, at most %d allowed", len(nets), maxItems)
	}
	ifaces := map[string]bool{}
	for _, iface := range v.spec.Domain.Devices.Interfaces {
		ifaces[iface.Name] = true
	}
	seen := map[string]bool{}
	pods, multusDefault := 0, 0
	for i, n := range nets {
		np := idx(p, i, "")
		v.ifaceName(np+".name", n.Name)
		if seen[n.Name] {
			v.fail(np+".name", "%q is used by another network", n.Name)
		}
		seen[n.Name] = true
		if n.Name != "" && !ifaces[n.Name] {
			v.fail(np+".name", "%q has no interface of the same name in spec.domain.devices.interfaces", n.Name)
		}
		switch {
		case n.ResourceClaim != nil:
			v.draNetwork(np, n)
		case n.Pod == nil && n.Multus == nil:
			v.fail(np, "no network source: set pod, multus or resourceClaim")
		case n.Pod != nil && n.Multus != nil:
			v.fail(np, "set only one of pod and multus")
		case n.Pod != nil:
			pods++
		case n.Multus != nil:
			if n.Multus.NetworkName == "" {
				v.fail(np+".multus.networkName", "required")
			}
			if n.Multus.Default {
				multusDefault++
			}
		}
	}
	if pods > 1 {
		v.fail(p, "%d pod networks; at most one allowed", pods)
	}
	if multusDefault > 1 {
		v.fail(p, "%d default multus networks; at most one allowed", multusDefault)
	}
	if pods > 0 && multusDefault > 0 {
		v.fail(p, "a pod network cannot be combined with a default multus network")
	}
}

// ifaceName applies KubeVirt's interface name rule (letters, digits, - and
// _), which also keeps the name safe in paths and device names.
func (v *validator) ifaceName(field, name string) {
	switch {
	case name == "":
		v.fail(field, "required")
	case len(name) > 63:
		v.fail(field, "%q is longer than 63 characters", truncate(name, 80))
	case !ifaceNameRE.MatchString(name):
		v.fail(field, "%q may contain only letters, digits, - and _", truncate(name, 80))
	}
}

func (v *validator) interfaces() {
	const p = "spec.domain.devices.interfaces"
	ifaces := v.spec.Domain.Devices.Interfaces
	if len(ifaces) > maxItems {
		v.fail(p, "%d interfaces, at most %d allowed", len(ifaces), maxItems)
	}
	nets := map[string]v1.Network{}
	for _, n := range v.spec.Networks {
		nets[n.Name] = n
	}
	seen := map[string]bool{}
	for i, iface := range ifaces {
		ip := idx(p, i, "")
		v.ifaceName(ip+".name", iface.Name)
		if seen[iface.Name] {
			v.fail(ip+".name", "%q is used by another interface", iface.Name)
		}
		seen[iface.Name] = true
		network, hasNet := nets[iface.Name]
		if iface.Name != "" && !hasNet {
			v.fail(ip+".name", "%q has no network of the same name in spec.networks", iface.Name)
		}
		v.binding(ip, iface, network, hasNet)
		if !validInterfaceModels[iface.Model] {
			v.fail(ip+".model", "%q is not one of virtio, e1000, e1000e, ne2k_pci, pcnet, rtl8139", truncate(iface.Model, 40))
		}
		if iface.MacAddress != "" {
			if mac, err := net.ParseMAC(iface.MacAddress); err != nil || len(mac) != 6 {
				v.fail(ip+".macAddress", "%q is not a MAC address like 02:00:00:12:34:56", truncate(iface.MacAddress, 40))
			} else if iface.Masquerade != nil && strings.EqualFold(mac.String(), reservedMasqueradeMAC) {
				v.fail(ip+".macAddress", "%s is reserved for the masquerade binding's in-pod bridge", reservedMasqueradeMAC)
			}
		}
		if iface.PciAddress != "" && !pciAddressRE.MatchString(iface.PciAddress) {
			v.fail(ip+".pciAddress", "%q is not a PCI address of the form 0000:00:1f.0", truncate(iface.PciAddress, 40))
		}
		switch iface.State {
		case "", v1.InterfaceStateAbsent, v1.InterfaceStateLinkUp, v1.InterfaceStateLinkDown:
		default:
			v.fail(ip+".state", "%q is not one of up, down, absent", truncate(string(iface.State), 40))
		}
		v.ports(ip, iface)
		v.dhcpOptions(ip, iface.DHCPOptions)
	}
}

// dhcpOptions applies KubeVirt's checks of an interface's dhcpOptions:
// NTP servers are IPv4 addresses, private options are in 224-254 and
// given once each.
func (v *validator) dhcpOptions(ip string, o *v1.DHCPOptions) {
	if o == nil {
		return
	}
	for j, s := range o.NTPServers {
		if net.ParseIP(s).To4() == nil {
			v.fail(idx(ip+".dhcpOptions.ntpServers", j, ""), "%q is not an IPv4 address", truncate(s, 40))
		}
	}
	seen := map[int]bool{}
	for j, p := range o.PrivateOptions {
		f := idx(ip+".dhcpOptions.privateOptions", j, "option")
		switch {
		case p.Option < 224 || p.Option > 254:
			v.fail(f, "%d is not in the private range 224-254", p.Option)
		case seen[p.Option]:
			v.fail(f, "%d is given twice", p.Option)
		}
		seen[p.Option] = true
	}
}

// binding checks that an interface has exactly one binding and that the
// binding suits its network, as KubeVirt requires.
func (v *validator) binding(ip string, iface v1.Interface, net v1.Network, hasNet bool) {
	b := iface.InterfaceBindingMethod
	var set []string
	for _, c := range []struct {
		name string
		on   bool
	}{
		{"bridge", b.Bridge != nil}, {"masquerade", b.Masquerade != nil}, {"sriov", b.SRIOV != nil},
		{"passtBinding", b.PasstBinding != nil}, {"binding", iface.Binding != nil},
		{"slirp", b.DeprecatedSlirp != nil}, {"macvtap", b.DeprecatedMacvtap != nil}, {"passt", b.DeprecatedPasst != nil},
	} {
		if c.on {
			set = append(set, c.name)
		}
	}
	switch len(set) {
	case 0:
		v.fail(ip, "no binding: set one of masquerade, bridge, sriov, passtBinding or binding (a plugin)")
		return
	case 1:
	default:
		v.fail(ip, "%d bindings set (%s); want exactly one", len(set), strings.Join(set, ", "))
		return
	}
	switch set[0] {
	case "slirp", "macvtap", "passt":
		v.fail(ip+"."+set[0], "this binding was removed in KubeVirt v1.3")
		return
	case "binding":
		if iface.Binding.Name == "" {
			v.fail(ip+".binding.name", "required")
		}
	}
	if !hasNet {
		return // reported already
	}
	switch set[0] {
	case "masquerade":
		if net.Pod == nil {
			v.fail(ip+".masquerade", "masquerade is only possible on the pod network")
		}
	case "passtBinding":
		if net.Pod == nil {
			v.fail(ip+".passtBinding", "passt is only possible on the pod network")
		}
	case "sriov":
		if net.Multus == nil && net.ResourceClaim == nil {
			v.fail(ip+".sriov", "sriov needs a multus or resourceClaim network")
		}
	case "bridge":
		if net.Pod == nil && net.Multus == nil {
			v.fail(ip+".bridge", "bridge needs a pod or multus network")
		}
	}
}

func (v *validator) ports(ip string, iface v1.Interface) {
	type key struct {
		proto string
		port  int32
	}
	seenPort := map[key]int{}
	seenName := map[string]bool{}
	for j, port := range iface.Ports {
		pp := idx(ip+".ports", j, "")
		if port.Port < 1 || port.Port > 65535 {
			v.fail(pp+".port", "%d is not in 1..65535", port.Port)
		}
		proto := strings.ToUpper(port.Protocol)
		switch port.Protocol {
		case "":
			proto = "TCP"
		case "TCP", "UDP":
		default:
			v.fail(pp+".protocol", "%q is not TCP or UDP", truncate(port.Protocol, 20))
		}
		k := key{proto, port.Port}
		if first, dup := seenPort[k]; dup {
			v.fail(pp, "%s port %d is already listed at %s", proto, port.Port, idx(ip+".ports", first, ""))
		} else {
			seenPort[k] = j
		}
		if port.Name != "" {
			if seenName[port.Name] {
				v.fail(pp+".name", "%q is used by another port", port.Name)
			}
			seenName[port.Name] = true
			if msgs := validation.IsValidPortName(port.Name); len(msgs) > 0 {
				v.fail(pp+".name", "%q is not a valid port name: %s", truncate(port.Name, 40), msgs[0])
			}
		}
	}
}

// draNetwork checks a network whose device a DRA driver allocates (an
// SR-IOV virtual function) as KubeVirt's admission does: a claim request
// naming one of spec.resourceClaims, no other source, and no Multus
// network beside it in the VMI.
func (v *validator) draNetwork(np string, n v1.Network) {
	rc := n.ResourceClaim
	if n.Pod != nil || n.Multus != nil {
		v.fail(np, "set only one of pod, multus and resourceClaim")
	}
	if rc.ClaimName == "" {
		v.fail(np+".resourceClaim.claimName", "required")
	}
	if rc.RequestName == "" {
		v.fail(np+".resourceClaim.requestName", "required")
	}
	if rc.ClaimName != "" && !slices.ContainsFunc(v.spec.ResourceClaims, func(c v1.VirtualMachineInstanceResourceClaim) bool { return c.Name == rc.ClaimName }) {
		v.fail(np+".resourceClaim.claimName", "%q is not in spec.resourceClaims", rc.ClaimName)
	}
	if slices.ContainsFunc(v.spec.Networks, func(o v1.Network) bool { return o.Multus != nil }) {
		v.fail(np, "Multus and resourceClaim networks cannot be mixed in one VMI")
	}
}
