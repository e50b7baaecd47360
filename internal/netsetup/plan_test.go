package netsetup_test

import (
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct{ pod, tap, bridge, nic string }{
		{"eth0", "tap0", "k6t-eth0", "eth0-nic"},
		{"net1", "tap1", "k6t-net1", "net1-nic"},
		{"pod16477688c0e", "tap16477688c0e", "k6t-16477688c0e", "16477688c0e-nic"},
	} {
		if got := plan.TapName(tc.pod); got != tc.tap {
			t.Errorf("TapName(%s) = %s, want %s", tc.pod, got, tc.tap)
		}
		if got := plan.BridgeName(tc.pod); got != tc.bridge || len(got) > 15 {
			t.Errorf("BridgeName(%s) = %s, want %s", tc.pod, got, tc.bridge)
		}
		if got := plan.NICName(tc.pod); got != tc.nic || len(got) > 15 {
			t.Errorf("NICName(%s) = %s, want %s", tc.pod, got, tc.nic)
		}
	}
	// sha256("blue") = 16477688c0e00699c6cfa4497a3612d7e83c532062b64b250fed8908128ed548
	if got := plan.HashedPodIfaceName("blue"); got != "pod16477688c0e" {
		t.Errorf("HashedPodIfaceName(blue) = %s", got)
	}
}

func withMultus(vmi *v1.VirtualMachineInstance, names ...string) *v1.VirtualMachineInstance {
	for _, n := range names {
		vmi.Spec.Networks = append(vmi.Spec.Networks, v1.Network{Name: n,
			NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: n + "-nad"}}})
		vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces, v1.Interface{
			Name: n, InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
	}
	return vmi
}

func TestPlanFor(t *testing.T) {
	vmi := withMultus(masqVMI("vm", v1.Port{Port: 80}, v1.Port{Port: 80, Protocol: "udp"}), "blue", "red")
	vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:11:22:33:44:55"
	ifaces, err := plan.PlanFor(vmi, plan.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ifaces) != 3 {
		t.Fatalf("plan has %d interfaces", len(ifaces))
	}
	p := ifaces[0]
	if p.PodIface != "eth0" || p.Tap != "tap0" || p.Bridge != "k6t-eth0" || p.Binding != "masquerade" ||
		p.MAC.String() != "02:11:22:33:44:55" || len(p.Ports) != 2 || p.Ports[1].Protocol != "UDP" ||
		p.Gateway4().String() != "10.0.2.1" || p.Guest4().String() != "10.0.2.2" ||
		p.Gateway6().String() != "fd10:0:2::1" || p.Guest6().String() != "fd10:0:2::2" {
		t.Errorf("primary = %+v", p)
	}
	if ifaces[1].PodIface != plan.HashedPodIfaceName("blue") || ifaces[1].Index != 1 || ifaces[2].Tap != plan.TapName(plan.HashedPodIfaceName("red")) {
		t.Errorf("secondaries = %+v / %+v", ifaces[1], ifaces[2])
	}
	ord, err := plan.PlanFor(vmi, plan.PlanOptions{OrdinalNames: true})
	if err != nil {
		t.Fatal(err)
	}
	if ord[1].PodIface != "net1" || ord[2].PodIface != "net2" || ord[2].Tap != "tap2" {
		t.Errorf("ordinal names: %s %s %s", ord[1].PodIface, ord[2].PodIface, ord[2].Tap)
	}

	cidr := masqVMI("vm")
	cidr.Spec.Networks[0].Pod.VMNetworkCIDR = "10.11.12.0/30"
	cidr.Spec.Networks[0].Pod.VMIPv6NetworkCIDR = "fd00:1::/64"
	ifaces, err = plan.PlanFor(cidr, plan.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ifaces[0].Guest4().String() != "10.11.12.2" || ifaces[0].Gateway6().String() != "fd00:1::1" {
		t.Errorf("vmNetworkCIDR not applied: %+v", ifaces[0])
	}

	mq := masqVMI("vm")
	yes := true
	mq.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
	mq.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 2, Threads: 2}
	if ifaces, err = plan.PlanFor(mq, plan.PlanOptions{}); err != nil || ifaces[0].Queues != 4 {
		t.Errorf("multiqueue: %v %+v", err, ifaces)
	}

	absent := withMultus(masqVMI("vm"), "blue")
	absent.Spec.Domain.Devices.Interfaces[1].State = v1.InterfaceStateAbsent
	if ifaces, err = plan.PlanFor(absent, plan.PlanOptions{}); err != nil || len(ifaces) != 1 {
		t.Errorf("absent interface: %v %d", err, len(ifaces))
	}
}

// passtVMI is masqVMI with the pod interface on KubeVirt's core passt
// binding.
func passtVMI(ports ...v1.Port) *v1.VirtualMachineInstance {
	vmi := masqVMI("vm", ports...)
	vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{PasstBinding: &v1.InterfacePasstBinding{}}
	return vmi
}

// TestPlanForPasst: the pod interface stays eth0, with no bridge, tap or
// renamed NIC (nothing is wired for passt), its declared ports kept for
// the forwards, and no tap queues.
func TestPlanForPasst(t *testing.T) {
	vmi := passtVMI(v1.Port{Port: 80}, v1.Port{Port: 53, Protocol: "udp"})
	yes := true
	vmi.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
	vmi.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 2, Threads: 1}
	ifaces, err := plan.PlanFor(vmi, plan.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ifaces) != 1 {
		t.Fatalf("plan has %d interfaces, want 1", len(ifaces))
	}
	p := ifaces[0]
	if p.Binding != plan.BindingPasst || p.PodIface != "eth0" || p.Tap != "" || p.Bridge != "" || p.NIC != "" || p.Queues != 0 {
		t.Errorf("passt interface = %+v", p)
	}
	if len(p.Ports) != 2 || p.Ports[0] != (plan.Port{Protocol: "TCP", Port: 80}) || p.Ports[1] != (plan.Port{Protocol: "UDP", Port: 53}) {
		t.Errorf("passt ports = %+v", p.Ports)
	}
}

// TestPlanForBindingPlugin: a binding plugin's interface is planned only
// when virt-handler says its domain attachment is a tap (the tap named as
// KubeVirt names it, no bridge); otherwise its sidecar makes the domain's
// interface and nothing is planned.
func TestPlanForBindingPlugin(t *testing.T) {
	vmi := withMultus(masqVMI("vm"), "blue")
	for i := range vmi.Spec.Domain.Devices.Interfaces {
		vmi.Spec.Domain.Devices.Interfaces[i].InterfaceBindingMethod = v1.InterfaceBindingMethod{}
		vmi.Spec.Domain.Devices.Interfaces[i].Binding = &v1.PluginBinding{Name: "mybind"}
	}
	ifaces, err := plan.PlanFor(vmi, plan.PlanOptions{})
	if err != nil || len(ifaces) != 0 {
		t.Errorf("without attachments: %v %+v, want nothing planned", err, ifaces)
	}
	ifaces, err = plan.PlanFor(vmi, plan.PlanOptions{DomainAttachments: map[string]string{"blue": "tap"}})
	if err != nil || len(ifaces) != 1 {
		t.Fatalf("blue attached as tap: %v %+v", err, ifaces)
	}
	if p := ifaces[0]; p.Binding != plan.BindingPluginTap || p.Name != "blue" || p.PodIface != plan.HashedPodIfaceName("blue") ||
		p.Tap != plan.TapName(plan.HashedPodIfaceName("blue")) || p.Bridge != "" || p.NIC != "" {
		t.Errorf("blue = %+v", p)
	}
}

func TestPlanForErrors(t *testing.T) {
	mod := func(f func(*v1.VirtualMachineInstance)) *v1.VirtualMachineInstance {
		vmi := masqVMI("vm")
		f(vmi)
		return vmi
	}
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		want string
	}{
		{"port zero", masqVMI("vm", v1.Port{Port: 0}), "interfaces[0].ports[0].port: 0 out of range"},
		{"port too big", masqVMI("vm", v1.Port{Port: 65536}), "ports[0].port: 65536 out of range"},
		{"repeated port", masqVMI("vm", v1.Port{Port: 22}, v1.Port{Port: 22, Protocol: "TCP"}), "ports[1]: TCP/22 repeats ports[0]"},
		{"bad protocol", masqVMI("vm", v1.Port{Port: 22, Protocol: "SCTP"}), "ports[0].protocol"},
		{"no binding", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{}
		}), "interfaces[0]: no binding method"},
		{"sriov", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}
		}), "interfaces[0].sriov"},
		{"subnet too small", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Networks[0].Pod.VMNetworkCIDR = "10.0.2.0/31"
		}), "vmNetworkCIDR: \"10.0.2.0/31\" is too small"},
		{"v6 subnet too small", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Networks[0].Pod.VMIPv6NetworkCIDR = "fd10::/127"
		}), "vmIPv6NetworkCIDR: \"fd10::/127\" is too small"},
		{"cidr not v4", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Networks[0].Pod.VMNetworkCIDR = "fd10::/64"
		}), "vmNetworkCIDR: \"fd10::/64\" is not an IPv4 CIDR"},
		{"no network", mod(func(v *v1.VirtualMachineInstance) { v.Spec.Networks = nil }), `interfaces[0].name: no network named "default"`},
		{"bad mac", mod(func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Interfaces[0].MacAddress = "zz" }), "interfaces[0].macAddress"},
		{"multicast mac", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces[0].MacAddress = "01:00:5e:00:00:01"
		}), "multicast"},
		{"masquerade on multus", withMultusMasq(), "masquerade: allowed only on the pod network"},
		{"passt on multus", withMultusPasst(), "interfaces[1].passtBinding: allowed only on the pod network"},
		{"passt bad port", passtVMI(v1.Port{Port: 70000}), "interfaces[0].ports[0].port: 70000 out of range"},
		{"discontinued passt", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{DeprecatedPasst: &v1.DeprecatedInterfacePasst{}}
		}), "interfaces[0].passt: binding removed in KubeVirt v1.3"},
		{"ports on bridge", mod(func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
			v.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 80}}
		}), "interfaces[0].ports: only the masquerade and passt bindings"},
	} {
		_, err := plan.PlanFor(tc.vmi, plan.PlanOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func withMultusMasq() *v1.VirtualMachineInstance {
	vmi := withMultus(masqVMI("vm"), "blue")
	vmi.Spec.Domain.Devices.Interfaces[1].InterfaceBindingMethod = v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}
	return vmi
}

func withMultusPasst() *v1.VirtualMachineInstance {
	vmi := withMultus(masqVMI("vm"), "blue")
	vmi.Spec.Domain.Devices.Interfaces[1].InterfaceBindingMethod = v1.InterfaceBindingMethod{PasstBinding: &v1.InterfacePasstBinding{}}
	return vmi
}
