package domain

import (
	"reflect"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

func TestVCPUChange(t *testing.T) {
	tests := []struct {
		name                string
		want, live, maximum uint64
		change              bool
		wantErr             string
	}{
		{"no change", 2, 2, 8, false, ""},
		{"hotplug up", 4, 2, 8, true, ""},
		{"up to the maximum", 8, 2, 8, true, ""},
		{"unplug", 1, 2, 8, true, ""},
		{"beyond maxSockets", 9, 2, 8, false, "asks for 9 vCPUs (sockets x cores x threads), more than the 8"},
		{"none", 0, 2, 8, false, "asks for no vCPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			change, err := vcpuChange(tt.want, tt.live, tt.maximum)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("vcpuChange: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("vcpuChange: %v, want an error with %q", err, tt.wantErr)
			case change != tt.change:
				t.Errorf("vcpuChange = %v, want %v", change, tt.change)
			}
		})
	}
}

func TestHostDevicesToHotplug(t *testing.T) {
	const withSRIOV = `<domain type="qemu"><name>ns_vm</name><devices>
  <hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x81" slot="0x00" function="0x1"/></source><alias name="ua-sriov-net1"/></hostdev>
  <hostdev mode="subsystem" type="pci" managed="no"><source><address domain="0x0000" bus="0x82" slot="0x00" function="0x1"/></source><alias name="ua-gpu1"/></hostdev>
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
	tests := []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		dom  string
		want []string
	}{
		{"no SR-IOV interfaces", vmi(map[string]string{"default": "domain, guest-agent"}), liveXML, nil},
		{"SR-IOV attached", vmi(map[string]string{"net1": "domain,multus-status"}, "net1"), withSRIOV, nil},
		{"SR-IOV not yet reported by Multus", vmi(map[string]string{"net2": "domain"}, "net1", "net2"), withSRIOV, nil},
		{"SR-IOV reported, not attached", vmi(map[string]string{"net1": "multus-status", "net2": "domain,multus-status"}, "net1", "net2"), withSRIOV, []string{"net2"}},
		{"no domain object yet", vmi(map[string]string{"net1": "multus-status"}, "net1"), "", []string{"net1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dom := liveDomainOrNil(t, tt.dom)
			if got := hostDevicesToHotplug(tt.vmi, dom); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestImageMIME(t *testing.T) {
	for in, want := range map[string]string{
		"P6\n720 400\n255\n\x00": "image/x-portable-pixmap",
		"\x89PNG\r\n\x1a\n\x00":  "image/png",
		"GIF89a":                 "",
		"":                       "",
	} {
		got, err := imageMIME([]byte(in))
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}
