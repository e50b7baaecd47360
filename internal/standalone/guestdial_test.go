package standalone

import (
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

func TestGuestPortForwarded(t *testing.T) {
	vmi := func(it v1.Interface, pod bool) *v1.VirtualMachineInstance {
		n := v1.Network{Name: it.Name}
		if pod {
			n.Pod = &v1.PodNetwork{}
		} else {
			n.Multus = &v1.MultusNetwork{NetworkName: "x"}
		}
		return &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{
			Domain:   v1.DomainSpec{Devices: v1.Devices{Interfaces: []v1.Interface{it}}},
			Networks: []v1.Network{n},
		}}
	}
	masq := v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}
	for _, c := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		err  string
	}{
		{name: "no ports declared", vmi: vmi(v1.Interface{Name: "default", InterfaceBindingMethod: masq}, true)},
		{name: "22 declared", vmi: vmi(v1.Interface{Name: "default", InterfaceBindingMethod: masq, Ports: []v1.Port{{Port: 80}, {Port: 22, Protocol: "TCP"}}}, true)},
		{name: "22 left out", vmi: vmi(v1.Interface{Name: "default", InterfaceBindingMethod: masq, Ports: []v1.Port{{Port: 80}, {Port: 22, Protocol: "UDP"}}}, true),
			err: "interface default declares the ports its masquerade binding forwards (TCP 80), and 22 is not one of them: add it to spec.domain.devices.interfaces[0].ports"},
		{name: "not the pod network", vmi: vmi(v1.Interface{Name: "sec", InterfaceBindingMethod: masq, Ports: []v1.Port{{Port: 80}}}, false)},
		{name: "bridge", vmi: vmi(v1.Interface{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}, Ports: []v1.Port{{Port: 80}}}, true)},
	} {
		err := guestPortForwarded(c.vmi, 22)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
}
