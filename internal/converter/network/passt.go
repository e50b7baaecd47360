package network

import (
	"crypto/sha256"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// KubeVirt v1.9.0 renders the core passt binding as a vhost-user interface
// with a passt backend, which libvirt starts. Neither works here: passt
// 0.0~git20230309 has no vhost-user, and Debian 12 builds libvirt 9.0
// with its passt backend disabled (the user-mode interface refuses
// backend type passt). So the launcher starts passt itself, in the pod's
// network namespace (netsetup/dhcp), and the guest's NIC is QEMU's own
// device on a stream netdev connected to passt's socket, which is what
// libvirt's passt backend makes of a user-mode interface. The guest sees
// what it sees under KubeVirt: a NIC behind passt with the pod's address,
// passt's DHCP and DNS, and the declared ports forwarded.

// passtNICModels are the QEMU devices of the interface models.
var passtNICModels = map[string]string{
	"virtio-non-transitional": "virtio-net-pci-non-transitional",
	"virtio-transitional":     "virtio-net-pci-transitional",
	"e1000":                   "e1000", "e1000e": "e1000e", "igb": "igb",
	"ne2k_pci": "ne2k_pci", "pcnet": "pcnet", "rtl8139": "rtl8139",
}

// passt adds the interface's NIC and netdev to the QEMU command line.
// Only what KubeVirt renders for a passt interface is taken from the
// spec: model, MAC and ACPI index (boot order, link state and queues are
// tap-only in KubeVirt).
func (n configurator) passt(vmi *v1.VirtualMachineInstance, iface v1.Interface, field string, dom *libvirtxml.Domain) error {
	if _, err := plan.ParsePorts(field, iface.Ports); err != nil {
		return err
	}
	model, err := n.model(vmi, iface, field)
	if err != nil {
		return err
	}
	dev, ok := passtNICModels[model]
	if !ok {
		return fmt.Errorf("%s.model: %q has no PCI device for passt here", field, model)
	}
	if iface.PciAddress != "" {
		// libvirt places its own devices without knowing of this one.
		return fmt.Errorf("%s.pciAddress: not with passtBinding in this launcher (its NIC is not one libvirt places)", field)
	}
	if iface.ACPIIndex < 0 {
		return fmt.Errorf("%s.acpiIndex: %d is negative", field, iface.ACPIIndex)
	}
	mac := passtMAC(vmi, iface.Name)
	if iface.MacAddress != "" {
		hw, err := parseMAC(iface.MacAddress, field)
		if err != nil {
			return err
		}
		mac = hw
	}
	bus, err := passtBus(vmi, n.ctx, field)
	if err != nil {
		return err
	}
	netdev := "hostpasst-" + iface.Name
	sock := plan.PasstSocket(n.ctx.Layout.PrivateDir, plan.PasstPodIface(vmi, iface.Name))
	// A slot of the root bus from the top down, one per passt NIC:
	// libvirt fills the root bus from the bottom and knows nothing of it.
	slot := passtTopSlot - n.passtNICs(dom)
	device := fmt.Sprintf("%s,netdev=%s,id=passt-%s,mac=%s,bus=%s,addr=%#x", dev, netdev, iface.Name, mac, bus, slot)
	if iface.ACPIIndex > 0 {
		device += ",acpi-index=" + strconv.Itoa(iface.ACPIIndex)
	}
	if dom.QEMUCommandline == nil {
		dom.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{}
	}
	dom.QEMUCommandline.Args = append(dom.QEMUCommandline.Args,
		libvirtxml.DomainQEMUCommandlineArg{Value: "-netdev"},
		libvirtxml.DomainQEMUCommandlineArg{Value: "stream,id=" + netdev + ",server=off,addr.type=unix,addr.path=" + qemuEscape(sock)},
		libvirtxml.DomainQEMUCommandlineArg{Value: "-device"},
		libvirtxml.DomainQEMUCommandlineArg{Value: device},
	)
	return nil
}

// passtTopSlot is the root bus slot of the first passt NIC; 0x1e and 0x1f
// are the ones libvirt and QEMU take for bridges and the q35 chipset.
const passtTopSlot = 0x1d

// passtNICs counts the passt NICs already on the QEMU command line.
func (n configurator) passtNICs(dom *libvirtxml.Domain) int {
	c := 0
	if dom.QEMUCommandline != nil {
		for _, a := range dom.QEMUCommandline.Args {
			if strings.HasPrefix(a.Value, "stream,id=hostpasst-") {
				c++
			}
		}
	}
	return c
}

// passtBus is the QEMU id of the machine's root bus: q35's PCIe root
// complex or the i440fx PCI bus (the machine configurator has not run
// yet, so the machine comes from the spec or the architecture's default).
func passtBus(vmi *v1.VirtualMachineInstance, c *facts.Context, field string) (string, error) {
	machine := ""
	if facts.Arch(vmi, c) == "amd64" {
		machine = "q35"
	}
	if m := vmi.Spec.Domain.Machine; m != nil && m.Type != "" {
		machine = m.Type
	}
	switch {
	case strings.HasPrefix(machine, "q35"), strings.HasPrefix(machine, "pc-q35"):
		return "pcie.0", nil
	case machine == "pc", strings.HasPrefix(machine, "pc-i440fx"):
		return "pci.0", nil
	}
	return "", fmt.Errorf("%s.passtBinding: not on machine type %q in this launcher (only amd64's q35 and pc)", field, machine)
}

// passtMAC is the MAC of a passt NIC whose spec gives none: in libvirt's
// 52:54:00 range, as libvirt would generate, but the same at every start
// (and on a migration's target) since it comes from the VMI's UID.
func passtMAC(vmi *v1.VirtualMachineInstance, name string) net.HardwareAddr {
	sum := sha256.Sum256([]byte(string(vmi.UID) + "/" + name))
	return net.HardwareAddr{0x52, 0x54, 0x00, sum[0], sum[1], sum[2]}
}

// qemuEscape doubles the commas of an option value, as QEMU's option
// parser wants.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }
