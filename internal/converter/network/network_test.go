package network_test

import (
	"crypto/sha256"
	"net"
	"slices"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/converter/network"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
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
	passt  = v1.InterfaceBindingMethod{PasstBinding: &v1.InterfacePasstBinding{}}
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
		// passt: no libvirt interface; QEMU's NIC on a stream netdev to the
		// launcher's passt socket for the pod interface. No MTU or tap from
		// the pod, and (as KubeVirt's passt interface) no boot order, link
		// state or queues.
		{Name: "passt", VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: passt, BootOrder: convtest.Ptr(uint(1)), State: v1.InterfaceStateLinkDown})(v)
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = convtest.Ptr(true)
			v.Spec.Domain.CPU.Cores = 4
		}, Ctx: func(c *facts.Context) {
			c.Interfaces = map[string]facts.Interface{"default": {MAC: "02:00:00:aa:bb:cc", MTU: 1400, Tap: "tapx"}}
		}, Check: passtArgs("stream,id=hostpasst-default,server=off,addr.type=unix,addr.path=/var/run/kubevirt-private/passt-eth0.sock",
			"virtio-net-pci-non-transitional,netdev=hostpasst-default,id=passt-default,mac="+passtMAC+",bus=pcie.0,addr=0x1d")},
		{Name: "passt mac, model, acpi index, pod interface from status", VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: passt, MacAddress: "02:11:22:33:44:55", Model: "e1000e", ACPIIndex: 2,
				Ports: []v1.Port{{Port: 80}}})(v)
			v.Status.Interfaces = []v1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth7"}}
		}, Ctx: func(c *facts.Context) { c.Layout = layout.Under("/w,x") },
			Check: passtArgs("stream,id=hostpasst-default,server=off,addr.type=unix,addr.path=/w,,x/private/passt-eth7.sock",
				"e1000e,netdev=hostpasst-default,id=passt-default,mac=02:11:22:33:44:55,bus=pcie.0,addr=0x1d,acpi-index=2")},
		{Name: "passt on i440fx", VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: passt})(v)
			v.Spec.Domain.Machine = &v1.Machine{Type: "pc-i440fx-7.2"}
		}, Check: passtArgs("stream,id=hostpasst-default,server=off,addr.type=unix,addr.path=/var/run/kubevirt-private/passt-eth0.sock",
			"virtio-net-pci-non-transitional,netdev=hostpasst-default,id=passt-default,mac="+passtMAC+",bus=pci.0,addr=0x1d")},
		{Name: "passt on arm64", VMI: func(v *v1.VirtualMachineInstance) {
			pod(v1.Interface{InterfaceBindingMethod: passt})(v)
			v.Spec.Architecture = "arm64"
			v.Spec.Domain.Machine = &v1.Machine{Type: "virt"}
		}, Err: `spec.domain.devices.interfaces[0].passtBinding: not on machine type "virt"`},
		{Name: "passt pci address", VMI: pod(v1.Interface{InterfaceBindingMethod: passt, PciAddress: "0000:00:05.0"}),
			Err: "spec.domain.devices.interfaces[0].pciAddress: not with passtBinding"},
		{Name: "passt bad port", VMI: pod(v1.Interface{InterfaceBindingMethod: passt, Ports: []v1.Port{{Port: 80, Protocol: "SCTP"}}}),
			Err: `spec.domain.devices.interfaces[0].ports[0].protocol: "SCTP" is not TCP or UDP`},
		{Name: "passt on multus", VMI: func(v *v1.VirtualMachineInstance) {
			multus(v)
			v.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = passt
		}, Err: `spec.domain.devices.interfaces[0].passtBinding: only works on the pod network, not network "blue"`},
		{Name: "discontinued passt", VMI: pod(v1.Interface{InterfaceBindingMethod: v1.InterfaceBindingMethod{DeprecatedPasst: &v1.DeprecatedInterfacePasst{}}}),
			Err: "spec.domain.devices.interfaces[0].passt: discontinued since KubeVirt v1.3"},
		// Binding plugins: without a tap attachment the plugin's sidecar adds
		// the interface; with one (tap or managedTap, which virt-handler
		// sends as tap) it is a tap interface like bridge's, on the tap or
		// pod interface the network phase found.
		{Name: "plugin left to its sidecar", VMI: pod(v1.Interface{Binding: &v1.PluginBinding{Name: "l2bridge"}}),
			Absent: []string{"<interface"}},
		{Name: "plugin with a tap attachment", VMI: pod(v1.Interface{Binding: &v1.PluginBinding{Name: "l2bridge"}}),
			Ctx: func(c *facts.Context) {
				c.DomainAttachments = map[string]string{"default": "tap"}
				c.Interfaces = map[string]facts.Interface{"default": {MAC: "02:00:00:aa:bb:cc", MTU: 1400, Tap: "eth0"}}
			}, Contains: []string{`<interface type="ethernet">`, `<target dev="eth0" managed="no">`,
				`<mac address="02:00:00:aa:bb:cc">`, `<mtu size="1400">`, `<alias name="ua-default">`}},
		{Name: "plugin without a name", VMI: pod(v1.Interface{Binding: &v1.PluginBinding{}}),
			Err: "spec.domain.devices.interfaces[0].binding.name: empty"},
		{Name: "slirp refused", VMI: pod(v1.Interface{InterfaceBindingMethod: v1.InterfaceBindingMethod{DeprecatedSlirp: &v1.DeprecatedInterfaceSlirp{}}}),
			Err: "slirp binding is not supported"},
		{Name: "no binding", VMI: pod(v1.Interface{}), Err: "spec.domain.devices.interfaces[0]: no binding method"},
		{Name: "no network", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "x", InterfaceBindingMethod: masq}}
		}, Err: `spec.domain.devices.interfaces[0]: no network named "x"`},
	})
}

// passtMAC is the MAC convtest's VMI gets on its passt interface named
// default: 52:54:00 and the first bytes of sha256("<uid>/default").
var passtMAC = func() string {
	sum := sha256.Sum256([]byte(string(convtest.VMI().UID) + "/default"))
	return net.HardwareAddr{0x52, 0x54, 0x00, sum[0], sum[1], sum[2]}.String()
}()

// passtArgs checks that the domain has no libvirt interface and that the
// QEMU command line ends with the passt netdev and device.
func passtArgs(netdev, device string) func(*testing.T, *libvirtxml.Domain) {
	return func(t *testing.T, dom *libvirtxml.Domain) {
		t.Helper()
		if n := len(dom.Devices.Interfaces); n != 0 {
			t.Errorf("%d libvirt interfaces, want none", n)
		}
		if dom.QEMUCommandline == nil {
			t.Fatal("no QEMU command line")
		}
		var got []string
		for _, a := range dom.QEMUCommandline.Args {
			got = append(got, a.Value)
		}
		want := []string{"-netdev", netdev, "-device", device}
		if !slices.Equal(got, want) {
			t.Errorf("QEMU arguments:\n got %q\nwant %q", got, want)
		}
	}
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
