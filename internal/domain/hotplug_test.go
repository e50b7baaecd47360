package domain

import (
	"fmt"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestSRIOVToAttach(t *testing.T) {
	const withSRIOV = `<domain type="qemu"><name>ns_vm</name><devices>
  <hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x81" slot="0x00" function="0x1"/></source><alias name="ua-sriov-net1"/></hostdev>
  <hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x82" slot="0x00" function="0x1"/></source><alias name="ua-gpu-gpu1"/></hostdev>
</devices></domain>`
	vmi := func(status map[string]string, sriov ...string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
		for _, n := range sriov {
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces,
				v1.Interface{Name: n, InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}})
		}
		for n, src := range status {
			v.Status.Interfaces = append(v.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: n, InfoSource: src})
		}
		return v
	}
	netPCI := facts.Devices{NetworkPCI: map[string]string{"net1": "0000:3b:02.1", "net2": "0000:3b:02.2"}}
	tests := []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		dom  string
		devs facts.Devices
		want string // aliases and host buses:functions attached, or the error
	}{
		{"no SR-IOV interfaces", vmi(map[string]string{"default": "domain, guest-agent"}), liveXML, facts.Devices{}, ""},
		{"SR-IOV attached", vmi(map[string]string{"net1": "domain, multus-status"}, "net1"), withSRIOV, facts.Devices{}, ""},
		{"SR-IOV not yet reported by Multus", vmi(map[string]string{"net2": "domain"}, "net1", "net2"), withSRIOV, facts.Devices{}, ""},
		{"SR-IOV reported, not attached", vmi(map[string]string{"net1": "multus-status", "net2": "domain, multus-status"}, "net1", "net2"), withSRIOV, netPCI,
			"ua-sriov-net2@3b.2"},
		{"no domain devices yet", vmi(map[string]string{"net1": "multus-status"}, "net1"), `<domain type="qemu"><name>ns_vm</name></domain>`, netPCI, "ua-sriov-net1@3b.1"},
		{"no network-info", vmi(map[string]string{"net1": "multus-status"}, "net1"), liveXML, facts.Devices{NetworkInfoErr: "open /etc/podinfo/network-info: no such file or directory"},
			`error: spec.domain.devices.interfaces[1]: no PCI address for SR-IOV interface "net1": the network-info file: open /etc/podinfo/network-info: no such file or directory`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var live libvirtxml.Domain
			if err := live.Unmarshal(tt.dom); err != nil {
				t.Fatal(err)
			}
			hds, err := sriovToAttach(tt.vmi, &tt.devs, &live)
			var got []string
			if err != nil {
				got = append(got, "error: "+err.Error())
			}
			for _, h := range hds {
				a := h.SubsysPCI.Source.Address
				got = append(got, fmt.Sprintf("%s@%x.%x", h.Alias.Name, *a.Bus, *a.Function))
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("got %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}
