package hostdev

import (
	"fmt"
	"slices"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// infoSourceMultus is the info source of an interface status whose network
// Multus attached to the pod (KubeVirt's vmispec.InfoSourceMultusStatus);
// a status lists its sources separated by ", ".
const infoSourceMultus = "multus-status"

// MultusReported says whether the VMI's status reports the interface
// name as attached to the pod by Multus.
func MultusReported(vmi *v1.VirtualMachineInstance, name string) bool {
	for _, st := range vmi.Status.Interfaces {
		if st.Name == name && slices.Contains(strings.Split(st.InfoSource, ", "), infoSourceMultus) {
			return true
		}
	}
	return false
}

// SRIOV is the host devices of the VMI's SR-IOV interfaces on Multus
// networks that the VMI's status reports attached to the pod (one not yet
// reported waits for a hotplug), as KubeVirt's launcher makes them: the
// virtual function's PCI address from the network-info file by network
// name, managed="no", alias ua-sriov-<name>, the interface's pciAddress as
// the guest address and its boot order. The interface's MAC and VLAN are
// the SR-IOV CNI's to set on the virtual function, not the domain's.
func SRIOV(vmi *v1.VirtualMachineInstance, d *facts.Devices) ([]libvirtxml.DomainHostdev, error) {
	var out []libvirtxml.DomainHostdev
	given := map[string]bool{}
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV == nil || !MultusReported(vmi, iface.Name) {
			continue
		}
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		if len(d.NetworkPCI) == 0 {
			why := "it names no SR-IOV network's PCI address"
			if d.NetworkInfoErr != "" {
				why = d.NetworkInfoErr
			}
			return nil, fmt.Errorf("%s: no PCI address for SR-IOV interface %q: the network-info file: %s", field, iface.Name, why)
		}
		addr, ok := d.NetworkPCI[iface.Name]
		if !ok || given[iface.Name] {
			return nil, fmt.Errorf("%s: no PCI address for SR-IOV interface %q: the network-info file has none for network %q", field, iface.Name, iface.Name)
		}
		given[iface.Name] = true
		hd, err := sriovHostdev(field, iface, addr)
		if err != nil {
			return nil, err
		}
		out = append(out, hd)
	}
	return out, nil
}

// sriovHostdev is the element of one SR-IOV interface whose virtual
// function is at host address addr.
func sriovHostdev(field string, iface v1.Interface, addr string) (libvirtxml.DomainHostdev, error) {
	hd, err := pciHostdev(SRIOVAlias+iface.Name, addr)
	if err != nil {
		return hd, fmt.Errorf("%s: SR-IOV interface %q: host address: %w", field, iface.Name, err)
	}
	if iface.PciAddress != "" {
		guest, err := pciAddress(iface.PciAddress)
		if err != nil {
			return hd, fmt.Errorf("%s.pciAddress: %w", field, err)
		}
		hd.Address = &libvirtxml.DomainAddress{PCI: guest}
	}
	if iface.BootOrder != nil {
		hd.Boot = &libvirtxml.DomainDeviceBoot{Order: *iface.BootOrder}
	}
	return hd, nil
}
