package devices

import (
	"fmt"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/network"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// TestPlanChanges: what Sync does to a running domain for a VMI, with the
// disks the VMI asks for made by the real converter (converter.Disks over
// PinLiveTargets), as applyChanges makes them.
func TestPlanChanges(t *testing.T) {
	l := layout.Default()
	hp := l.HotplugDiskDir
	alias := func(n string) *libvirtxml.DomainAlias { return &libvirtxml.DomainAlias{Name: "ua-" + n} }
	liveDisk := func(name, dev, bus, path string) libvirtxml.DomainDisk {
		d := libvirtxml.DomainDisk{Device: "disk", Alias: alias(name), Target: &libvirtxml.DomainDiskTarget{Dev: dev, Bus: bus},
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"}}
		if path != "" {
			d.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}
		}
		return d
	}
	liveCD := func(name, path string) libvirtxml.DomainDisk {
		d := liveDisk(name, "sda", "sata", path)
		d.Device = "cdrom"
		return d
	}
	iface := func(name string) libvirtxml.DomainInterface { return libvirtxml.DomainInterface{Alias: alias(name)} }
	disk := func(name string, bus v1.DiskBus) v1.Disk {
		return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}}
	}
	cd := func(name string) v1.Disk {
		return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}}}
	}
	empty := func(name string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}}
	}
	hotVol := func(name string) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}}}
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
	root := liveDisk("root", "vda", "virtio", l.EmptyDisk("root"))
	rootVMI := []v1.Disk{disk("root", v1.DiskBusVirtio)}
	rootVol := []v1.Volume{empty("root")}

	type attach struct{ name, dev, bus, path string }
	for _, tc := range []struct {
		name        string
		vmi         *v1.VirtualMachineInstance
		live        *libvirtxml.Domain
		attach      []attach
		detach      []string
		media       map[string]string // disk -> new source ("" ejected)
		unsupported []string          // substrings, one per message
	}{
		{name: "in step", vmi: vmi(rootVMI, rootVol, nil, masq("default", "")), live: dom([]libvirtxml.DomainDisk{root}, iface("default"))},
		{name: "hotplug volume mounted into the pod: attached on scsi unit 0 with the next free name",
			vmi:  vmi(append(rootVMI, disk("data", v1.DiskBusSCSI)), append(rootVol, hotVol("data")), []v1.VolumeStatus{hot("data", v1.HotplugVolumeMounted)}),
			live: dom([]libvirtxml.DomainDisk{root}), attach: []attach{{"data", "sda", "scsi", hp + "/data.img"}}},
		{name: "hotplug volume ready, on virtio",
			vmi:  vmi(append(rootVMI, disk("data", v1.DiskBusVirtio)), append(rootVol, hotVol("data")), []v1.VolumeStatus{hot("data", v1.VolumeReady)}),
			live: dom([]libvirtxml.DomainDisk{root}), attach: []attach{{"data", "vdb", "virtio", hp + "/data.img"}}},
		{name: "live names are kept: a new disk does not take the name of one still attached",
			vmi: vmi(append(rootVMI, disk("b", v1.DiskBusSCSI), disk("a", v1.DiskBusSCSI)), append(rootVol, hotVol("a"), hotVol("b")),
				[]v1.VolumeStatus{hot("a", v1.VolumeReady), hot("b", v1.VolumeReady)}),
			live: dom([]libvirtxml.DomainDisk{root, liveDisk("a", "sda", "scsi", hp+"/a.img")}), attach: []attach{{"b", "sdb", "scsi", hp + "/b.img"}}},
		{name: "hotplug volume not in the pod yet: KubeVirt waits too",
			vmi:  vmi(append(rootVMI, disk("data", v1.DiskBusSCSI)), append(rootVol, hotVol("data")), []v1.VolumeStatus{hot("data", v1.HotplugVolumeAttachedToNode)}),
			live: dom([]libvirtxml.DomainDisk{root})},
		{name: "hotplug on sata is refused",
			vmi:  vmi(append(rootVMI, disk("data", v1.DiskBusSATA)), append(rootVol, hotVol("data")), []v1.VolumeStatus{hot("data", v1.VolumeReady)}),
			live: dom([]libvirtxml.DomainDisk{root}), unsupported: []string{`disk "data": hotplug on bus sata is not possible`}},
		{name: "hotplugged volume removed from the VMI: detached",
			vmi:  vmi(rootVMI, rootVol, nil),
			live: dom([]libvirtxml.DomainDisk{root, liveDisk("data", "sda", "scsi", hp+"/data.img")}), detach: []string{"data"}},
		{name: "a disk on sata from the hotplug directory cannot be unplugged",
			vmi:  vmi(rootVMI, rootVol, nil),
			live: dom([]libvirtxml.DomainDisk{root, liveDisk("data", "sda", "sata", hp+"/data.img")}), unsupported: []string{`disk "data": unplug from bus sata`}},
		{name: "a disk of the domain the VMI does not name, not hotplugged: not ours to judge", vmi: vmi(nil, nil, nil),
			live: dom([]libvirtxml.DomainDisk{root})},
		{name: "CD-ROM ejected (volume gone)", vmi: vmi([]v1.Disk{cd("cd")}, nil, nil),
			live: dom([]libvirtxml.DomainDisk{liveCD("cd", hp+"/cd.img")}), media: map[string]string{"cd": ""}},
		{name: "CD-ROM medium inserted", vmi: vmi([]v1.Disk{cd("cd")}, []v1.Volume{hotVol("cd")}, []v1.VolumeStatus{hot("cd", v1.HotplugVolumeMounted)}),
			live: dom([]libvirtxml.DomainDisk{liveCD("cd", "")}), media: map[string]string{"cd": hp + "/cd.img"}},
		{name: "CD-ROM medium on its way", vmi: vmi([]v1.Disk{cd("cd")}, []v1.Volume{hotVol("cd")}, []v1.VolumeStatus{hot("cd", v1.HotplugVolumeAttachedToNode)}),
			live: dom([]libvirtxml.DomainDisk{liveCD("cd", "")})},
		{name: "CD-ROM with its medium from the start, whatever its path looks like now",
			vmi:  vmi([]v1.Disk{cd("cd")}, []v1.Volume{{Name: "cd", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}}}, nil),
			live: dom([]libvirtxml.DomainDisk{liveCD("cd", "/dev/cd")})},
		{name: "CD-ROM medium in place", vmi: vmi([]v1.Disk{cd("cd")}, []v1.Volume{hotVol("cd")}, []v1.VolumeStatus{hot("cd", v1.VolumeReady)}),
			live: dom([]libvirtxml.DomainDisk{liveCD("cd", hp+"/cd.img")})},
		{name: "SR-IOV interfaces are host devices", vmi: vmi(nil, nil, nil,
			v1.Interface{Name: "sriov", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}), live: dom(nil)},
		{name: "several at once", vmi: vmi([]v1.Disk{disk("a", v1.DiskBusSCSI), disk("b", v1.DiskBusUSB)}, []v1.Volume{hotVol("a"), hotVol("b")},
			[]v1.VolumeStatus{hot("a", v1.VolumeReady), hot("b", v1.VolumeReady)}, masq("n", "")),
			live: &libvirtxml.Domain{}, attach: []attach{{"a", "sda", "scsi", hp + "/a.img"}}, unsupported: []string{`disk "b": hotplug on bus usb`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := facts.Default(l)
			want, err := converter.Disks(PinLiveTargets(tc.vmi, tc.live), c)
			if err != nil {
				t.Fatalf("converter.Disks: %v", err)
			}
			before, _ := tc.live.Marshal()
			plan := PlanChanges(tc.vmi, want, tc.live, hp, nil)
			if after, _ := tc.live.Marshal(); after != before {
				t.Errorf("PlanChanges changed the live domain")
			}
			if len(plan.Attach) != len(tc.attach) {
				t.Errorf("attach %d disks, want %d: %+v", len(plan.Attach), len(tc.attach), plan.Attach)
			}
			for i, a := range tc.attach {
				if i >= len(plan.Attach) {
					break
				}
				got := plan.Attach[i]
				if n, _ := userAlias(got.Alias); n != a.name || got.Target.Dev != a.dev || got.Target.Bus != a.bus || diskSourcePath(&got) != a.path {
					t.Errorf("attach %d: %s %s/%s %s, want %+v", i, n, got.Target.Dev, got.Target.Bus, diskSourcePath(&got), a)
				}
				if a.bus == "scsi" && (got.Address == nil || got.Address.Drive == nil || *got.Address.Drive.Unit != uint(a.dev[2]-'a')) {
					t.Errorf("attach %s: address %+v, want the SCSI unit of %s", a.name, got.Address, a.dev)
				}
			}
			var detached []string
			for _, d := range plan.Detach {
				n, _ := userAlias(d.Alias)
				detached = append(detached, n)
			}
			if strings.Join(detached, ",") != strings.Join(tc.detach, ",") {
				t.Errorf("detach %q, want %q", detached, tc.detach)
			}
			media := map[string]string{}
			for _, d := range plan.Media {
				n, _ := userAlias(d.Alias)
				media[n] = diskSourcePath(&d)
				if d.Driver == nil || d.Driver.Type != "raw" || d.Target.Dev != "sda" {
					t.Errorf("medium change of %s: driver %+v target %+v, want the live drive with a raw source", n, d.Driver, d.Target)
				}
			}
			if len(media) != len(tc.media) {
				t.Errorf("media %q, want %q", media, tc.media)
			}
			for n, p := range tc.media {
				if got, ok := media[n]; !ok || got != p {
					t.Errorf("media %q, want %q", media, tc.media)
				}
			}
			if len(plan.Unsupported) != len(tc.unsupported) {
				t.Fatalf("unsupported %q, want %d messages like %q", plan.Unsupported, len(tc.unsupported), tc.unsupported)
			}
			all := strings.Join(plan.Unsupported, "\n")
			for _, w := range tc.unsupported {
				if !strings.Contains(all, w) {
					t.Errorf("unsupported %q, want one with %q", plan.Unsupported, w)
				}
			}
		})
	}
}

// TestPlanInterfaces: KubeVirt's rules for NIC hotplug and unplug
// (virtwrap/network/nichotplug.go): plugged once Multus reports the pod
// interface, only the bridge binding or a binding plugin attached as a
// tap on a secondary network; unplugged
// when absent and on a hashed tap; everything else refused by name.
func TestPlanInterfaces(t *testing.T) {
	blueTap := network.TapName(&v1.Network{Name: "blue", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "blue-net"}}}, "")
	bridge := func(name string, state v1.InterfaceState) v1.Interface {
		return v1.Interface{Name: name, State: state, InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}
	}
	masq := func(name string) v1.Interface {
		return v1.Interface{Name: name, InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}
	}
	multus := func(name string) v1.Network {
		return v1.Network{Name: name, NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: name + "-net"}}}
	}
	plugin := func(name string, state v1.InterfaceState) v1.Interface {
		return v1.Interface{Name: name, State: state, Binding: &v1.PluginBinding{Name: "mybind"}}
	}
	pod := v1.Network{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}
	live := func(name, tap string) libvirtxml.DomainInterface {
		return libvirtxml.DomainInterface{Alias: &libvirtxml.DomainAlias{Name: "ua-" + name}, Target: &libvirtxml.DomainInterfaceTarget{Dev: tap}}
	}
	status := func(name, src string) v1.VirtualMachineInstanceNetworkInterface {
		return v1.VirtualMachineInstanceNetworkInterface{Name: name, InfoSource: src}
	}
	for _, tc := range []struct {
		name        string
		ifaces      []v1.Interface
		nets        []v1.Network
		status      []v1.VirtualMachineInstanceNetworkInterface
		live        []libvirtxml.DomainInterface
		attach      map[string]string // virt-handler's InterfaceDomainAttachment
		plug        []string
		unplug      []string
		unsupported string // substring of the one message; "" none
	}{
		{name: "in step", ifaces: []v1.Interface{masq("default"), bridge("blue", "")}, nets: []v1.Network{pod, multus("blue")},
			status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "domain, guest-agent, multus-status")},
			live:   []libvirtxml.DomainInterface{live("default", "tap0"), live("blue", blueTap)}},
		{name: "new interface, its pod interface reported by Multus: plugged", ifaces: []v1.Interface{masq("default"), bridge("blue", "")},
			nets: []v1.Network{pod, multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status")},
			live: []libvirtxml.DomainInterface{live("default", "tap0")}, plug: []string{"blue"}},
		{name: "info sources in any order", ifaces: []v1.Interface{bridge("blue", "")},
			nets: []v1.Network{multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status, domain")},
			plug: []string{"blue"}},
		{name: "new interface, its pod interface not there yet: waits", ifaces: []v1.Interface{masq("default"), bridge("blue", "")},
			nets: []v1.Network{pod, multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "domain")},
			live: []libvirtxml.DomainInterface{live("default", "tap0")}},
		{name: "new interface with a link down: plugged (the converter writes the link)", ifaces: []v1.Interface{bridge("blue", v1.InterfaceStateLinkDown)},
			nets: []v1.Network{multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status")},
			plug: []string{"blue"}},
		{name: "masquerade cannot be plugged", ifaces: []v1.Interface{masq("blue")},
			nets: []v1.Network{multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status")},
			unsupported: `interface "blue": hotplug is possible only with the bridge binding`},
		{name: "binding plugin attached as a tap: plugged", ifaces: []v1.Interface{plugin("blue", "")},
			nets: []v1.Network{multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status")},
			attach: map[string]string{"blue": "tap"}, plug: []string{"blue"}},
		{name: "binding plugin left to its sidecar cannot be plugged", ifaces: []v1.Interface{plugin("blue", "")},
			nets: []v1.Network{multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status")},
			unsupported: `interface "blue": hotplug is possible only with the bridge binding or a binding plugin attached as a tap`},
		{name: "binding plugin's sidecar interface: its link is left alone", ifaces: []v1.Interface{plugin("blue", v1.InterfaceStateLinkDown)},
			nets: []v1.Network{multus("blue")}, live: []libvirtxml.DomainInterface{live("blue", "")}},
		{name: "binding plugin attached as a tap, absent: unplugged", ifaces: []v1.Interface{plugin("blue", v1.InterfaceStateAbsent)},
			nets: []v1.Network{multus("blue")}, live: []libvirtxml.DomainInterface{live("blue", blueTap)},
			attach: map[string]string{"blue": "tap"}, unplug: []string{"blue"}},
		{name: "the pod network cannot be plugged", ifaces: []v1.Interface{bridge("default", "")},
			nets: []v1.Network{pod}, status: []v1.VirtualMachineInstanceNetworkInterface{status("default", "multus-status")},
			unsupported: `interface "default": hotplug`},
		{name: "absent: unplugged", ifaces: []v1.Interface{masq("default"), bridge("blue", v1.InterfaceStateAbsent)},
			nets: []v1.Network{pod, multus("blue")}, live: []libvirtxml.DomainInterface{live("default", "tap0"), live("blue", blueTap)},
			unplug: []string{"blue"}},
		{name: "absent and gone: nothing", ifaces: []v1.Interface{bridge("blue", v1.InterfaceStateAbsent)},
			nets: []v1.Network{multus("blue")}, status: []v1.VirtualMachineInstanceNetworkInterface{status("blue", "multus-status")}},
		{name: "absent on an ordinal tap: refused", ifaces: []v1.Interface{bridge("blue", v1.InterfaceStateAbsent)},
			nets: []v1.Network{multus("blue")}, live: []libvirtxml.DomainInterface{live("blue", "tap1")},
			unsupported: `interface "blue": unplug is possible only for an interface on a secondary network with a hashed tap name, not tap "tap1"`},
		{name: "the pod network absent: refused", ifaces: []v1.Interface{masq("default"), bridge("x", v1.InterfaceStateAbsent)},
			nets: []v1.Network{pod, {Name: "x", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}},
			live: []libvirtxml.DomainInterface{live("default", "tap0"), live("x", "tap0")}, unsupported: `interface "x": unplug`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &v1.VirtualMachineInstance{}
			v.Spec.Domain.Devices.Interfaces, v.Spec.Networks, v.Status.Interfaces = tc.ifaces, tc.nets, tc.status
			dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: tc.live}}
			plan := PlanChanges(v, nil, dom, layout.Default().HotplugDiskDir, tc.attach)
			var unplug []string
			for _, i := range plan.Unplug {
				n, _ := userAlias(i.Alias)
				unplug = append(unplug, n)
			}
			if fmt.Sprint(plan.Plug) != fmt.Sprint(tc.plug) || fmt.Sprint(unplug) != fmt.Sprint(tc.unplug) {
				t.Errorf("plug %q unplug %q, want %q and %q", plan.Plug, unplug, tc.plug, tc.unplug)
			}
			switch {
			case tc.unsupported == "" && len(plan.Unsupported) > 0:
				t.Errorf("unsupported %q, want none", plan.Unsupported)
			case tc.unsupported != "" && (len(plan.Unsupported) != 1 || !strings.Contains(plan.Unsupported[0], tc.unsupported)):
				t.Errorf("unsupported %q, want one message with %q", plan.Unsupported, tc.unsupported)
			}
			if len(plan.Links) != 0 {
				t.Errorf("links %+v, want none", plan.Links)
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
			plan := PlanChanges(v, nil, live, "/hp", nil)
			if len(plan.Unsupported) != 0 {
				t.Errorf("unsupported %q", plan.Unsupported)
			}
			switch {
			case tc.want == "" && len(plan.Links) != 0:
				t.Errorf("links %+v, want no change", plan.Links)
			case tc.want != "" && (len(plan.Links) != 1 || plan.Links[0].Link == nil || plan.Links[0].Link.State != tc.want):
				t.Errorf("links %+v, want the interface with link %q", plan.Links, tc.want)
			case tc.want != "" && plan.Links[0].MAC.Address != "02:00:00:00:00:01":
				t.Errorf("the changed interface lost its MAC: %+v", plan.Links[0])
			}
		})
	}
	// The live domain itself is left as it was.
	live := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{iface("default", "")}}}
	v := &v1.VirtualMachineInstance{}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{masq("default", v1.InterfaceStateLinkDown)}
	PlanChanges(v, nil, live, "/hp", nil)
	if live.Devices.Interfaces[0].Link != nil {
		t.Errorf("PlanChanges changed the live domain: %+v", live.Devices.Interfaces[0].Link)
	}
}

func TestGrowSize(t *testing.T) {
	const mi = 1 << 20
	zero, tenth := 0.0, 0.1
	for _, tc := range []struct {
		name               string
		c                  growCandidate
		capacity, physical uint64
		usable             int64
		want               uint64
		err                string
	}{
		{name: "file: grows to the PVC's size", c: growCandidate{pvcSize: 64 * mi, overhead: &zero}, capacity: 32 * mi, physical: 32 * mi, usable: 1 << 40, want: 64 * mi},
		{name: "file: less the file system overhead, down to 1 MiB", c: growCandidate{pvcSize: 100 * mi, overhead: &tenth}, capacity: 32 * mi, usable: 1 << 40, want: 90 * mi},
		{name: "file: bounded by the usable space", c: growCandidate{pvcSize: 64 * mi, overhead: &zero}, capacity: 32 * mi, usable: 40*mi + 5, want: 40 * mi},
		{name: "file: as big already", c: growCandidate{pvcSize: 64 * mi, overhead: &zero}, capacity: 64 * mi, usable: 1 << 40},
		{name: "file: bigger than the PVC allows: left alone, never shrunk", c: growCandidate{pvcSize: 16 * mi, overhead: &zero}, capacity: 32 * mi, usable: 1 << 40},
		{name: "file: overhead unknown: left alone (KubeVirt)", c: growCandidate{pvcSize: 64 * mi}, capacity: 32 * mi, usable: 1 << 40},
		{name: "file: PVC size unknown: left alone", c: growCandidate{overhead: &zero}, capacity: 32 * mi, usable: 1 << 40},
		{name: "libvirt knows no size: left alone", c: growCandidate{pvcSize: 64 * mi, overhead: &zero}, usable: 1 << 40},
		{name: "block: grows to the device", c: growCandidate{block: true}, capacity: 32 * mi, physical: 48 * mi, want: 48 * mi},
		{name: "block: as big", c: growCandidate{block: true}, capacity: 48 * mi, physical: 48 * mi},
		{name: "block: a device that shrank is an error", c: growCandidate{name: "data", block: true}, capacity: 48 * mi, physical: 32 * mi,
			err: `disk "data": its block device shrank`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.growSize(tc.capacity, tc.physical, tc.usable)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("growSize: %v, want an error with %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Errorf("growSize: %v", err)
			case got != tc.want:
				t.Errorf("growSize = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestGrowCandidates(t *testing.T) {
	overhead := v1.Percent("0.055")
	pvc := func(name string, size string) v1.VolumeStatus {
		q := resource.MustParse(size)
		return v1.VolumeStatus{Name: name, PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{
			Capacity: k8sv1.ResourceList{k8sv1.ResourceStorage: q}, Requests: k8sv1.ResourceList{k8sv1.ResourceStorage: resource.MustParse("1Gi")},
			FilesystemOverhead: &overhead}}
	}
	disk := func(name, dev string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{Device: "disk", Alias: &libvirtxml.DomainAlias{Name: "ua-" + name}, Target: &libvirtxml.DomainDiskTarget{Dev: dev},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/pvc/" + name + "/disk.img"}}}
	}
	overlay := disk("eph", "vdc")
	overlay.BackingStore = &libvirtxml.DomainDiskBackingStore{Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/pvc/eph/disk.img"}}}
	data := disk("data", "vda")
	data.BackingStore = &libvirtxml.DomainDiskBackingStore{Source: &libvirtxml.DomainDiskSource{}} // libvirt's "none", as libvirtxml reads it
	cd := disk("cd", "sda")
	cd.Device = "cdrom"
	v := &v1.VirtualMachineInstance{}
	v.Status.VolumeStatus = []v1.VolumeStatus{pvc("data", "2Gi"), pvc("eph", "1Gi"), pvc("cd", "1Gi"), pvc("gone", "1Gi"), {Name: "nopvc"}}
	got := growCandidates(v, []libvirtxml.DomainDisk{data, overlay, cd, disk("gone", "sdb"), disk("nopvc", "vdd")},
		[]libvirtxml.DomainDisk{disk("gone", "sdb")})
	if len(got) != 1 || got[0].name != "data" || got[0].target != "vda" || got[0].path != "/pvc/data/disk.img" ||
		got[0].pvcSize != 1<<30 || got[0].overhead == nil || *got[0].overhead != 0.055 {
		t.Errorf("growCandidates = %+v, want only data (vda, the smaller of request and capacity, overhead 0.055)", got)
	}
}

// TestPlanPorts: PCIe hotplugs beyond the free pcie-root-ports are refused
// before any is made, naming each device that does not fit.
func TestPlanPorts(t *testing.T) {
	const liveXML = `<domain type="qemu"><name>ns_vm</name><devices>
  <controller type="pci" index="0" model="pcie-root"/>
  <controller type="pci" index="1" model="pcie-root-port"><target chassis="1" port="0x10"/><address type="pci" domain="0x0000" bus="0x00" slot="0x02" function="0x0"/></controller>
  <controller type="pci" index="2" model="pcie-root-port"><target chassis="2" port="0x11"/><address type="pci" domain="0x0000" bus="0x00" slot="0x02" function="0x1"/></controller>
  <controller type="pci" index="3" model="pcie-root-port"><target chassis="3" port="0x12" hotplug="off"/><address type="pci" domain="0x0000" bus="0x00" slot="0x02" function="0x2"/></controller>
  <controller type="pci" index="4" model="pcie-root-port"><target chassis="4" port="0x13"/><address type="pci" domain="0x0000" bus="0x00" slot="0x02" function="0x3"/></controller>
  <disk type="file" device="disk"><source file="/r.qcow2"/><target dev="vda" bus="virtio"/><alias name="ua-root"/><address type="pci" domain="0x0000" bus="0x01" slot="0x00" function="0x0"/></disk>
</devices></domain>`
	var live libvirtxml.Domain
	if err := live.Unmarshal(liveXML); err != nil {
		t.Fatal(err)
	}
	if free, ports := freeRootPorts(&live); free != 2 || ports != 4 {
		t.Fatalf("freeRootPorts = %d free of %d, want 2 of 4 (one taken, one with hotplug off)", free, ports)
	}
	disk := func(name, bus string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{Alias: &libvirtxml.DomainAlias{Name: "ua-" + name}, Target: &libvirtxml.DomainDiskTarget{Bus: bus}}
	}
	for _, tc := range []struct {
		name   string
		attach []libvirtxml.DomainDisk
		plug   []string
		refuse []string
	}{
		{name: "two fit", attach: []libvirtxml.DomainDisk{disk("a", "virtio")}, plug: []string{"blue"}},
		{name: "scsi disks take no port", attach: []libvirtxml.DomainDisk{disk("a", "scsi"), disk("b", "scsi"), disk("c", "virtio")}, plug: []string{"blue"}},
		{name: "one too many", attach: []libvirtxml.DomainDisk{disk("a", "virtio"), disk("b", "virtio")}, plug: []string{"blue"},
			refuse: []string{`interface "blue": no free PCIe root port to plug into (2 free for 3 devices to plug; the VM has 4 ports)`}},
		{name: "two too many", attach: []libvirtxml.DomainDisk{disk("a", "virtio"), disk("b", "virtio"), disk("c", "virtio"), disk("d", "virtio")},
			refuse: []string{`disk "c", disk "d": no free PCIe root port`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Plan{Attach: tc.attach, Plug: tc.plug}
			planPorts(&plan, &live)
			if len(plan.Unsupported) != len(tc.refuse) {
				t.Fatalf("unsupported %q, want %d like %q", plan.Unsupported, len(tc.refuse), tc.refuse)
			}
			for i, w := range tc.refuse {
				if !strings.Contains(plan.Unsupported[i], w) {
					t.Errorf("unsupported[%d] = %q, want %q", i, plan.Unsupported[i], w)
				}
			}
		})
	}
	// A machine without root ports (i440fx): libvirt decides.
	plan := Plan{Attach: []libvirtxml.DomainDisk{disk("a", "virtio")}}
	planPorts(&plan, &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}})
	if len(plan.Unsupported) != 0 {
		t.Errorf("without root ports: %q, want no refusal", plan.Unsupported)
	}
}

// TestDefinitionDrift: the hotplugged disks on which the definition and
// the running domain disagree, as a daemon killed in the middle of a
// hotplug or an unplug leaves them; other disks never count.
func TestDefinitionDrift(t *testing.T) {
	hp := layout.Default().HotplugDiskDir
	disk := func(name, path, device string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{Device: device, Alias: &libvirtxml.DomainAlias{Name: "ua-" + name},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}}
	}
	dom := func(disks ...libvirtxml.DomainDisk) *libvirtxml.Domain {
		return &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: disks}}
	}
	root := disk("root", "/var/run/kubevirt-ephemeral-disks/root.qcow2", "disk")
	hot := disk("hp", hp+"/hp.img", "disk")
	other := disk("hp2", hp+"/hp2.img", "disk")
	cd := disk("cd", hp+"/cd.img", "cdrom")
	names := func(ds []libvirtxml.DomainDisk) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Alias.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name      string
		live, def *libvirtxml.Domain
		drop, add string
	}{
		{"agree", dom(root, hot), dom(root, hot), "", ""},
		{"unplugged, the definition not written", dom(root), dom(root, hot), "ua-hp", ""},
		{"plugged, the definition not written", dom(root, hot, other), dom(root, other), "", "ua-hp"},
		{"both ways", dom(root, other), dom(root, hot), "ua-hp", "ua-hp2"},
		{"not hotplugged disks and CD-ROM media never count", dom(cd), dom(root), "", ""},
		{"no devices", &libvirtxml.Domain{}, dom(hot), "ua-hp", ""},
	} {
		drop, add := definitionDrift(tc.live, tc.def, hp)
		if names(drop) != tc.drop || names(add) != tc.add {
			t.Errorf("%s: drop %q add %q, want %q %q", tc.name, names(drop), names(add), tc.drop, tc.add)
		}
	}
}
