package network_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/converter/network"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func pod(iface v1.Interface) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) {
		if iface.Name == "" {
			iface.Name = "default"
		}
		v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, iface)
		v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: iface.Name, NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}})
	}
}

var (
	masq   = v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}
	bridge = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
)

func TestInterfaces(t *testing.T) {
	multus := func(v *v1.VirtualMachineInstance) {
		v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: "blue", InterfaceBindingMethod: bridge})
		v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: "blue", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "ns/blue-net"}}})
	}
	convtest.Run(t, []convtest.Case{
		{Name: "masquerade", VMI: pod(v1.Interface{InterfaceBindingMethod: masq}), Contains: []string{
			`<interface type="ethernet">`, `<target dev="tap0" managed="no">`, `<model type="virtio-non-transitional">`,
			`<rom enabled="no">`, `<alias name="ua-default">`}, Absent: []string{"<mac", "<mtu", "<link", "<boot"}},
		{Name: "facts give mac mtu tap", VMI: pod(v1.Interface{InterfaceBindingMethod: bridge}),
			Ctx: func(c *facts.Context) {
				c.Interfaces = map[string]facts.Interface{"default": {MAC: "02:00:00:AA:BB:CC", MTU: 1400, Tap: "tapx"}}
			}, Contains: []string{`<mac address="02:00:00:aa:bb:cc">`, `<mtu size="1400">`, `<target dev="tapx" managed="no">`}},
		{Name: "spec mac wins", VMI: pod(v1.Interface{InterfaceBindingMethod: bridge, MacAddress: "de:ad:00:00:be:ef"}),
			Ctx: func(c *facts.Context) {
				c.Interfaces = map[string]facts.Interface{"default": {MAC: "02:00:00:aa:bb:cc"}}
			},
			Contains: []string{`<mac address="de:ad:00:00:be:ef">`}},
		{Name: "bad mac", VMI: pod(v1.Interface{InterfaceBindingMethod: bridge, MacAddress: "zz"}), Err: `spec.domain.devices.interfaces[0].macAddress: "zz" is not a MAC address`},
		{Name: "multicast mac", VMI: pod(v1.Interface{InterfaceBindingMethod: bridge, MacAddress: "01:00:5e:00:00:01"}), Err: "multicast"},
		{Name: "boot order keeps the rom", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, BootOrder: convtest.Ptr(uint(1))}),
			Contains: []string{`<boot order="1">`}, Absent: []string{"<rom"}},
		{Name: "model e1000", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, Model: "e1000"}), Contains: []string{`<model type="e1000">`}},
		{Name: "bad model", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, Model: "vmxnet9"}), Err: `spec.domain.devices.interfaces[0].model: "vmxnet9" is not supported`},
		{Name: "link down", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, State: v1.InterfaceStateLinkDown}), Contains: []string{`<link state="down">`}},
		{Name: "absent dropped", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, State: v1.InterfaceStateAbsent}), Absent: []string{"<interface"}},
		{Name: "multiqueue", VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: masq})(v)
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = convtest.Ptr(true)
			v.Spec.Domain.CPU.Cores = 4
		}, Contains: []string{`<driver name="vhost" queues="4">`}},
		{Name: "multiqueue under emulation", Emulation: true, VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: masq})(v)
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = convtest.Ptr(true)
			v.Spec.Domain.CPU.Cores = 300
		}, Contains: []string{`<driver queues="256">`}},
		{Name: "acpi index and pci address", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, ACPIIndex: 3, PciAddress: "0000:81:01.0"}),
			Contains: []string{`<acpi index="3">`, `<address type="pci" domain="0x0000" bus="0x81" slot="0x01" function="0x0">`}},
		{Name: "bad pci address", VMI: pod(v1.Interface{InterfaceBindingMethod: masq, PciAddress: "81:01"}), Err: "spec.domain.devices.interfaces[0].pciAddress"},
		{Name: "secondary multus tap is hashed", VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: masq})(v)
			multus(v)
		}, Contains: []string{`<target dev="tap0" managed="no">`, `<target dev="` + network.TapName(&v1.Network{Name: "blue", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{}}}, "") + `" managed="no">`, `<alias name="ua-blue">`}},
		{Name: "masquerade on multus", VMI: func(v *v1.VirtualMachineInstance) {
			multus(v)
			v.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = masq
		}, Err: "masquerade: only works on the pod network"},
		{Name: "passt refused", VMI: pod(v1.Interface{InterfaceBindingMethod: v1.InterfaceBindingMethod{PasstBinding: &v1.InterfacePasstBinding{}}}),
			Err: "spec.domain.devices.interfaces[0].passtBinding: the passt binding is not supported"},
		{Name: "plugin refused", VMI: pod(v1.Interface{Binding: &v1.PluginBinding{Name: "l2bridge"}}),
			Err: `spec.domain.devices.interfaces[0].binding: network binding plugin "l2bridge" is not supported`},
		{Name: "slirp refused", VMI: pod(v1.Interface{InterfaceBindingMethod: v1.InterfaceBindingMethod{DeprecatedSlirp: &v1.DeprecatedInterfaceSlirp{}}}),
			Err: "slirp binding is not supported"},
		{Name: "no binding", VMI: pod(v1.Interface{}), Err: "spec.domain.devices.interfaces[0]: no binding method"},
		{Name: "no network", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "x", InterfaceBindingMethod: masq}}
		}, Err: `spec.domain.devices.interfaces[0]: no network named "x"`},
	})
}

func TestTapName(t *testing.T) {
	for _, tc := range []struct {
		netw  v1.Network
		known string
		want  string
	}{
		{v1.Network{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}, "", "tap0"},
		{v1.Network{Name: "x", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "a", Default: true}}}, "", "tap0"},
		// sha256("blue") = 16477688c0e00699c6cfa4497a3612d7e83c532062b64b250fed8908128ed548
		{v1.Network{Name: "blue", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "a"}}}, "", "tap16477688c0e"},
		{v1.Network{Name: "blue", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "a"}}}, "tap1", "tap1"},
	} {
		if got := network.TapName(&tc.netw, tc.known); got != tc.want {
			t.Errorf("TapName(%s, %q) = %s, want %s", tc.netw.Name, tc.known, got, tc.want)
		}
	}
}
