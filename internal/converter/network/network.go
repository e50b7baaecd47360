// Package network converts the VMI's tap-attached interfaces (masquerade and
// bridge bindings) into <interface type="ethernet"> elements whose tap device
// the network setup phase (or a binding plugin with a tap domain
// attachment) has already created, and passt interfaces into a
// QEMU NIC on the launcher's passt (passt.go). SR-IOV interfaces are host
// devices (package hostdev); other bindings are refused.
package network

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// maxQueues caps virtio-net multiqueue, as KubeVirt does.
const maxQueues = 256

type configurator struct{ ctx *facts.Context }

// New returns the interface configurator.
func New(c *facts.Context) facts.Configurator { return configurator{ctx: c} }

var passThroughModels = map[string]bool{
	"e1000": true, "e1000e": true, "igb": true, "ne2k_pci": true, "pcnet": true, "rtl8139": true,
}

func (n configurator) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	networks := map[string]*v1.Network{}
	for i := range vmi.Spec.Networks {
		networks[vmi.Spec.Networks[i].Name] = &vmi.Spec.Networks[i]
	}
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	seen := map[string]bool{}
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		if seen[iface.Name] {
			return fmt.Errorf("%s.name: %q is used twice", field, iface.Name)
		}
		seen[iface.Name] = true
		if iface.State == v1.InterfaceStateAbsent {
			continue
		}
		netw, ok := networks[iface.Name]
		if !ok {
			return fmt.Errorf("%s: no network named %q in spec.networks", field, iface.Name)
		}
		if err := binding(iface, netw, field); err != nil {
			return err
		}
		if iface.SRIOV != nil {
			continue // a host device
		}
		if iface.Binding != nil && n.ctx.DomainAttachments[iface.Name] != "tap" {
			// A binding plugin without a tap attachment: its sidecar
			// adds the interface to the domain (OnDefineDomain).
			continue
		}
		if iface.PasstBinding != nil {
			if err := n.passt(vmi, iface, field, dom); err != nil {
				return err
			}
			continue
		}
		out, err := n.iface(vmi, iface, netw, field)
		if err != nil {
			return err
		}
		dom.Devices.Interfaces = append(dom.Devices.Interfaces, *out)
	}
	return nil
}

// binding accepts the tap bindings and SR-IOV and names what it refuses.
func binding(iface v1.Interface, netw *v1.Network, field string) error {
	switch {
	case iface.Binding != nil:
		if iface.Binding.Name == "" {
			return fmt.Errorf("%s.binding.name: empty", field)
		}
	case iface.PasstBinding != nil:
		if netw.Pod == nil {
			return fmt.Errorf("%s.passtBinding: only works on the pod network, not network %q", field, netw.Name)
		}
	case iface.DeprecatedPasst != nil:
		return fmt.Errorf("%s.passt: discontinued since KubeVirt v1.3 (passtBinding replaces it)", field)
	case iface.DeprecatedSlirp != nil:
		return fmt.Errorf("%s.slirp: the slirp binding is not supported", field)
	case iface.DeprecatedMacvtap != nil:
		return fmt.Errorf("%s.macvtap: the macvtap binding is not supported", field)
	case iface.Masquerade != nil:
		if netw.Pod == nil {
			return fmt.Errorf("%s.masquerade: only works on the pod network, not network %q", field, netw.Name)
		}
	case iface.Bridge != nil, iface.SRIOV != nil:
	default:
		return fmt.Errorf("%s: no binding method (bridge, masquerade, passtBinding or sriov) set", field)
	}
	if netw.ResourceClaim != nil && iface.SRIOV != nil {
		return nil // a DRA driver's virtual function
	}
	if netw.Pod == nil && netw.Multus == nil {
		return fmt.Errorf("spec.networks[%s]: neither pod nor multus is set", netw.Name)
	}
	return nil
}

func (n configurator) iface(vmi *v1.VirtualMachineInstance, iface v1.Interface, netw *v1.Network, field string) (*libvirtxml.DomainInterface, error) {
	known := n.ctx.Interfaces[iface.Name]
	out := &libvirtxml.DomainInterface{
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Target: &libvirtxml.DomainInterfaceTarget{Dev: TapName(netw, known.Tap), Managed: "no"},
		Alias:  &libvirtxml.DomainAlias{Name: "ua-" + iface.Name},
	}
	model, err := n.model(vmi, iface, field)
	if err != nil {
		return nil, err
	}
	out.Model = &libvirtxml.DomainInterfaceModel{Type: model}
	mac := iface.MacAddress
	if mac == "" {
		mac = known.MAC
	}
	if mac != "" {
		hw, err := parseMAC(mac, field)
		if err != nil {
			return nil, err
		}
		out.MAC = &libvirtxml.DomainInterfaceMAC{Address: hw.String()}
	}
	if known.MTU > 0 {
		out.MTU = &libvirtxml.DomainInterfaceMTU{Size: known.MTU}
	}
	if iface.BootOrder != nil {
		if *iface.BootOrder == 0 {
			return nil, fmt.Errorf("%s.bootOrder: must be 1 or more", field)
		}
		out.Boot = &libvirtxml.DomainDeviceBoot{Order: *iface.BootOrder}
	} else if a := facts.Arch(vmi, n.ctx); a == "amd64" || a == "arm64" {
		// No PXE ROM unless the interface boots: faster start, fewer surprises.
		out.ROM = &libvirtxml.DomainROM{Enabled: "no"}
	}
	if mq := vmi.Spec.Domain.Devices.NetworkInterfaceMultiQueue; mq != nil && *mq && model == facts.VirtioModel(vmi, n.ctx) {
		q := min(facts.VCPUs(vmi), maxQueues)
		if q > 1 {
			out.Driver = &libvirtxml.DomainInterfaceDriver{Name: "vhost", Queues: uint(q)}
			if n.ctx.Emulation {
				// Under emulation vhost-net may be unavailable (an
				// unprivileged daemon, no /dev/vhost-net): let libvirt
				// use it only if it can.
				out.Driver.Name = ""
			}
		}
	}
	switch iface.State {
	case v1.InterfaceStateLinkDown:
		out.Link = &libvirtxml.DomainInterfaceLink{State: "down"}
	case "", v1.InterfaceStateLinkUp:
	default:
		return nil, fmt.Errorf("%s.state: %q is not up, down or absent", field, iface.State)
	}
	if iface.ACPIIndex < 0 {
		return nil, fmt.Errorf("%s.acpiIndex: %d is negative", field, iface.ACPIIndex)
	} else if iface.ACPIIndex > 0 {
		out.ACPI = &libvirtxml.DomainDeviceACPI{Index: uint(iface.ACPIIndex)}
	}
	if iface.PciAddress != "" {
		a, err := facts.PCIAddress(iface.PciAddress)
		if err != nil {
			return nil, fmt.Errorf("%s.pciAddress: %w", field, err)
		}
		out.Address = &libvirtxml.DomainAddress{PCI: a}
	}
	return out, nil
}

// model is the interface's libvirt model: virtio as the VMI's virtio
// flavour, or one of the models passed through.
func (n configurator) model(vmi *v1.VirtualMachineInstance, iface v1.Interface, field string) (string, error) {
	switch model := iface.Model; {
	case model == "" || model == v1.VirtIO:
		return facts.VirtioModel(vmi, n.ctx), nil
	case passThroughModels[model]:
		return model, nil
	default:
		return "", fmt.Errorf("%s.model: %q is not supported", field, model)
	}
}

// parseMAC checks a MAC address for the interface at field.
func parseMAC(mac, field string) (net.HardwareAddr, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return nil, fmt.Errorf("%s.macAddress: %q is not a MAC address", field, mac)
	}
	if hw[0]&1 != 0 {
		return nil, fmt.Errorf("%s.macAddress: %q is a multicast address", field, mac)
	}
	return hw, nil
}

// TapName is the tap device KubeVirt's network setup creates for a network:
// tap0 for the pod network, and for a secondary (Multus) network "tap" plus
// the first 11 hex digits of the SHA-256 of the network's name (the hashed
// pod interface name "pod<11 hex>" minus its "pod" prefix). A name the
// network phase reported wins.
func TapName(netw *v1.Network, known string) string {
	if known != "" {
		return known
	}
	if netw.Pod != nil || (netw.Multus != nil && netw.Multus.Default) {
		return "tap0"
	}
	sum := sha256.Sum256([]byte(netw.Name))
	return "tap" + hex.EncodeToString(sum[:])[:11]
}
