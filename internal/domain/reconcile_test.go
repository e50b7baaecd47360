package domain

import (
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

func TestUnappliedChanges(t *testing.T) {
	const hp = "/pod/hotplug-disks"
	alias := func(n string) *libvirtxml.DomainAlias { return &libvirtxml.DomainAlias{Name: "ua-" + n} }
	fileDisk := func(name, path string) libvirtxml.DomainDisk {
		d := libvirtxml.DomainDisk{Device: "disk", Alias: alias(name)}
		if path != "" {
			d.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}
		}
		return d
	}
	cdrom := func(name, path string) libvirtxml.DomainDisk {
		d := fileDisk(name, path)
		d.Device = "cdrom"
		return d
	}
	iface := func(name, link string) libvirtxml.DomainInterface {
		i := libvirtxml.DomainInterface{Alias: alias(name)}
		if link != "" {
			i.Link = &libvirtxml.DomainInterfaceLink{State: link}
		}
		return i
	}
	disk := func(name string) v1.Disk {
		return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}
	}
	cd := func(name string) v1.Disk {
		return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}}}
	}
	vol := func(name string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}}
	}
	hot := func(name string, phase v1.VolumePhase) v1.VolumeStatus {
		return v1.VolumeStatus{Name: name, Phase: phase, HotplugVolume: &v1.HotplugVolumeStatus{}}
	}
	masq := func(name string, state v1.InterfaceState) v1.Interface {
		return v1.Interface{Name: name, State: state, InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}
	}
	vmi := func(disks []v1.Disk, vols []v1.Volume, st []v1.VolumeStatus, ifaces ...v1.Interface) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Devices.Disks, v.Spec.Volumes, v.Status.VolumeStatus = disks, vols, st
		v.Spec.Domain.Devices.Interfaces = ifaces
		return v
	}
	dom := func(disks []libvirtxml.DomainDisk, ifaces ...libvirtxml.DomainInterface) *libvirtxml.Domain {
		return &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: disks, Interfaces: ifaces}}
	}
	root := fileDisk("root", "/pod/disk.qcow2")

	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		live *libvirtxml.Domain
		want []string // substrings, one per message; none: nothing unapplied
	}{
		{name: "in step", vmi: vmi([]v1.Disk{disk("root")}, []v1.Volume{vol("root")}, nil, masq("default", "")),
			live: dom([]libvirtxml.DomainDisk{root}, iface("default", ""))},
		{name: "hotplug volume mounted into the pod", vmi: vmi([]v1.Disk{disk("root"), disk("data")}, []v1.Volume{vol("root"), vol("data")},
			[]v1.VolumeStatus{hot("data", v1.HotplugVolumeMounted)}),
			live: dom([]libvirtxml.DomainDisk{root}), want: []string{`disk "data": hotplug`}},
		{name: "hotplug volume ready", vmi: vmi([]v1.Disk{disk("data")}, []v1.Volume{vol("data")}, []v1.VolumeStatus{hot("data", v1.VolumeReady)}),
			live: dom(nil), want: []string{`disk "data": hotplug`}},
		{name: "hotplug volume not in the pod yet: KubeVirt waits too", vmi: vmi([]v1.Disk{disk("data")}, []v1.Volume{vol("data")},
			[]v1.VolumeStatus{hot("data", v1.HotplugVolumeAttachedToNode)}), live: dom(nil)},
		{name: "hotplugged volume attached already", vmi: vmi([]v1.Disk{disk("data")}, []v1.Volume{vol("data")},
			[]v1.VolumeStatus{hot("data", v1.VolumeReady)}), live: dom([]libvirtxml.DomainDisk{fileDisk("data", hp+"/data.img")})},
		{name: "hotplugged volume removed from the VMI", vmi: vmi([]v1.Disk{disk("root")}, []v1.Volume{vol("root")}, nil),
			live: dom([]libvirtxml.DomainDisk{root, fileDisk("data", hp+"/data.img")}), want: []string{`disk "data": unplug`}},
		{name: "a disk of the domain the VMI does not name, not hotplugged: not ours to judge", vmi: vmi(nil, nil, nil),
			live: dom([]libvirtxml.DomainDisk{root})},
		{name: "CD-ROM ejected (volume gone)", vmi: vmi([]v1.Disk{cd("cd")}, nil, nil),
			live: dom([]libvirtxml.DomainDisk{cdrom("cd", hp+"/cd.img")}), want: []string{`disk "cd": ejecting`}},
		{name: "CD-ROM medium inserted", vmi: vmi([]v1.Disk{cd("cd")}, []v1.Volume{vol("cd")}, []v1.VolumeStatus{hot("cd", v1.HotplugVolumeMounted)}),
			live: dom([]libvirtxml.DomainDisk{cdrom("cd", "")}), want: []string{`disk "cd": inserting`}},
		{name: "CD-ROM medium on its way", vmi: vmi([]v1.Disk{cd("cd")}, []v1.Volume{vol("cd")}, []v1.VolumeStatus{hot("cd", v1.HotplugVolumeAttachedToNode)}),
			live: dom([]libvirtxml.DomainDisk{cdrom("cd", "")})},
		{name: "CD-ROM with its medium from the start", vmi: vmi([]v1.Disk{cd("cd")}, []v1.Volume{vol("cd")}, nil),
			live: dom([]libvirtxml.DomainDisk{cdrom("cd", "/pod/cd.iso")})},
		{name: "interface added", vmi: vmi(nil, nil, nil, masq("default", ""), masq("blue", "")),
			live: dom(nil, iface("default", "")), want: []string{`interface "blue": hotplug`}},
		{name: "interface marked absent", vmi: vmi(nil, nil, nil, masq("default", ""), masq("blue", v1.InterfaceStateAbsent)),
			live: dom(nil, iface("default", ""), iface("blue", "")), want: []string{`interface "blue": unplug`}},
		{name: "absent interface gone already", vmi: vmi(nil, nil, nil, masq("blue", v1.InterfaceStateAbsent)), live: dom(nil)},
		{name: "SR-IOV interfaces are host devices", vmi: vmi(nil, nil, nil,
			v1.Interface{Name: "sriov", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}), live: dom(nil)},
		{name: "several at once", vmi: vmi([]v1.Disk{disk("a"), disk("b")}, []v1.Volume{vol("a"), vol("b")},
			[]v1.VolumeStatus{hot("a", v1.VolumeReady), hot("b", v1.VolumeReady)}, masq("n", "")),
			live: &libvirtxml.Domain{}, want: []string{`disk "a"`, `disk "b"`, `interface "n"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unappliedChanges(tc.vmi, tc.live, hp)
			if len(got) != len(tc.want) {
				t.Fatalf("unappliedChanges = %q, want %d messages like %q", got, len(tc.want), tc.want)
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("unappliedChanges = %q, want one with %q", got, w)
				}
			}
		})
	}
}

func TestPlanLinkState(t *testing.T) {
	masq := func(name string, state v1.InterfaceState) v1.Interface {
		return v1.Interface{Name: name, State: state, InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}
	}
	iface := func(name, link string) libvirtxml.DomainInterface {
		i := libvirtxml.DomainInterface{Alias: &libvirtxml.DomainAlias{Name: "ua-" + name},
			MAC: &libvirtxml.DomainInterfaceMAC{Address: "02:00:00:00:00:01"}}
		if link != "" {
			i.Link = &libvirtxml.DomainInterfaceLink{State: link}
		}
		return i
	}
	for _, tc := range []struct {
		name  string
		state v1.InterfaceState
		live  string // the live <link state>, "" none
		want  string // the new link state, "" no change
	}{
		{"set down", v1.InterfaceStateLinkDown, "", "down"},
		{"set down, libvirt says up", v1.InterfaceStateLinkDown, "up", "down"},
		{"set up", v1.InterfaceStateLinkUp, "down", "up"},
		{"unset means up", "", "down", "up"},
		{"down as it is", v1.InterfaceStateLinkDown, "down", ""},
		{"up as it is", v1.InterfaceStateLinkUp, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &v1.VirtualMachineInstance{}
			v.Spec.Domain.Devices.Interfaces = []v1.Interface{masq("default", tc.state)}
			live := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{iface("default", tc.live)}}}
			plan := planChanges(v, live, "/hp")
			if len(plan.unsupported) != 0 {
				t.Errorf("unsupported %q", plan.unsupported)
			}
			switch {
			case tc.want == "" && len(plan.links) != 0:
				t.Errorf("links %+v, want no change", plan.links)
			case tc.want != "" && (len(plan.links) != 1 || plan.links[0].Link == nil || plan.links[0].Link.State != tc.want):
				t.Errorf("links %+v, want the interface with link %q", plan.links, tc.want)
			case tc.want != "" && plan.links[0].MAC.Address != "02:00:00:00:00:01":
				t.Errorf("the changed interface lost its MAC: %+v", plan.links[0])
			}
		})
	}
	// The live domain itself is left as it was.
	live := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{iface("default", "")}}}
	v := &v1.VirtualMachineInstance{}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{masq("default", v1.InterfaceStateLinkDown)}
	planChanges(v, live, "/hp")
	if live.Devices.Interfaces[0].Link != nil {
		t.Errorf("planChanges changed the live domain: %+v", live.Devices.Interfaces[0].Link)
	}
}
