package domain

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
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

func TestMemoryChange(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	vmi := func(guest, maxGuest, boot string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Memory = &v1.Memory{Guest: q(guest)}
		if maxGuest != "" {
			v.Spec.Domain.Memory.MaxGuest = q(maxGuest)
		}
		if boot != "" {
			v.Status.Memory = &v1.MemoryStatus{GuestAtBoot: q(boot)}
		}
		return v
	}
	withMem := func(requestedKiB uint) *libvirtxml.Domain {
		return &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Memorydevs: []libvirtxml.DomainMemorydev{{
			Model: "virtio-mem", Alias: &libvirtxml.DomainAlias{Name: "virtiomem0"},
			Target: &libvirtxml.DomainMemorydevTarget{
				Size:      &libvirtxml.DomainMemorydevTargetSize{Value: 3 << 20, Unit: "KiB"},
				Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: requestedKiB, Unit: "KiB"},
			}}}}}
	}
	none := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}}
	for _, tc := range []struct {
		name         string
		vmi          *v1.VirtualMachineInstance
		live         *libvirtxml.Domain
		change       bool // a device to attach or update
		attach       bool
		requestedKiB uint // of the device to attach or update
		sizeKiB      uint // of a device to attach
		err          string
	}{
		{name: "first growth attaches the device", vmi: vmi("2Gi", "4Gi", "1Gi"), live: none, change: true, attach: true, requestedKiB: 1 << 20, sizeKiB: 3 << 20},
		{name: "at the boot size without a device: nothing", vmi: vmi("1Gi", "4Gi", "1Gi"), live: none},
		{name: "grows further: the device is updated", vmi: vmi("3Gi", "4Gi", "1Gi"), live: withMem(1 << 20), change: true, requestedKiB: 2 << 20},
		{name: "back down", vmi: vmi("1Gi", "4Gi", "1Gi"), live: withMem(1 << 20), change: true, requestedKiB: 0},
		{name: "as requested already", vmi: vmi("2Gi", "4Gi", "1Gi"), live: withMem(1 << 20)},
		{name: "no maxGuest", vmi: vmi("2Gi", "", "1Gi"), live: none, err: "maxGuest is not set"},
		{name: "no boot size", vmi: vmi("2Gi", "4Gi", ""), live: none, err: "guestAtBoot is not set"},
		{name: "beyond maxGuest", vmi: vmi("5Gi", "4Gi", "1Gi"), live: none, err: "guest 5Gi is more than maxGuest 4Gi"},
		{name: "below the boot size", vmi: vmi("512Mi", "4Gi", "1Gi"), live: none, err: "less than the 1Gi the VM booted with"},
		{name: "not in 2 MiB blocks", vmi: vmi("1025Mi", "4Gi", "1Gi"), live: none, err: "multiples of 2 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, attach, err := memoryChange(tc.vmi, tc.live)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("memoryChange: %v, want an error with %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatalf("memoryChange: %v", err)
			case !tc.change && dev != nil:
				t.Fatalf("memoryChange = %+v, want no change", dev)
			}
			if tc.change {
				if dev == nil || dev.Target.Requested.Value != tc.requestedKiB || attach != tc.attach {
					t.Fatalf("memoryChange = %+v (attach %v), want requested %d KiB (attach %v)", dev, attach, tc.requestedKiB, tc.attach)
				}
				if attach && (dev.Model != "virtio-mem" || dev.Target.Size.Value != tc.sizeKiB || dev.Target.Block.Value != 2048 || dev.Target.Node == nil) {
					t.Errorf("the device to attach: %+v", dev.Target)
				}
				if !attach && (dev.Alias == nil || dev.Alias.Name != "virtiomem0") {
					t.Errorf("the updated device lost its alias: %+v", dev)
				}
				if !attach && tc.live.Devices.Memorydevs[0].Target.Requested.Value == dev.Target.Requested.Value {
					t.Errorf("memoryChange changed the live domain")
				}
			}
		})
	}
}
