package domain

import (
	"reflect"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

func TestVCPUChange(t *testing.T) {
	tests := []struct {
		name       string
		want, live uint64
		wantErr    string
	}{
		{"no change", 2, 2, ""},
		{"hotplug up", 4, 2, "asks for 4 vCPUs (sockets x cores x threads) and the domain has 2"},
		{"unplug", 1, 2, "asks for 1 vCPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := vcpuChange(tt.want, tt.live)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("nothing to do, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "not supported") {
				t.Errorf("err %v, want %q ... not supported", err, tt.wantErr)
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
