package devices

import (
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/network"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Plan is what Sync must do to a defined domain for the VMI, in the
// order it does it, and what it cannot do, one message per device.
//
// KubeVirt's launcher applies these on every Sync. A Sync that answered
// success without them would leave virt-handler waiting forever for a
// volume that never appears in the guest, or, on unplug, unmounting a
// volume that QEMU still has open (it unmounts right after the Sync).
type Plan struct {
	// Detach are live disks of hotplugged volumes the VMI no longer has.
	Detach []libvirtxml.DomainDisk
	// Attach are the converted disks of hotplug volumes mounted into the
	// pod that the domain lacks.
	Attach []libvirtxml.DomainDisk
	// Media are live CD-ROM drives with the source they must hold (nil:
	// ejected).
	Media []libvirtxml.DomainDisk
	// Grow are live disks on PVCs whose size may have to follow their
	// volume (growSize decides, with libvirt's figures).
	Grow []growCandidate
	// Unplug are live interfaces whose VMI interface is absent now.
	Unplug []libvirtxml.DomainInterface
	// Plug names the VMI interfaces to hotplug: bridge-bound, on a Multus
	// network whose pod interface is there (the VMI status says so).
	Plug []string
	// Links are interfaces whose link state must change: the live
	// interface with its new <link state>.
	Links []libvirtxml.DomainInterface
	// Unsupported names each change Sync cannot make; when there is one,
	// Sync makes none and fails.
	Unsupported []string
}

// Empty reports a plan with nothing to do and nothing refused.
func (p Plan) Empty() bool {
	return len(p.Detach)+len(p.Attach)+len(p.Media)+len(p.Grow)+len(p.Unplug)+len(p.Plug)+len(p.Links)+len(p.Unsupported) == 0
}

// PlanChanges diffs the VMI against the live domain. want are the VMI's
// disks as the converter makes them (converter.Disks, with the live targets
// pinned: PinLiveTargets), live the domain's XML as libvirt has it now,
// hotplugDir the directory virt-handler mounts hotplugged volumes into,
// attach virt-handler's InterfaceDomainAttachment (a binding plugin's
// interface with "tap" is plugged as a bridge one is). Disks and interfaces are matched by their alias ("ua-<name>").
//
// It is pure, and leaves live as it was.
func PlanChanges(v *v1.VirtualMachineInstance, want []libvirtxml.DomainDisk, live *libvirtxml.Domain, hotplugDir string, attach map[string]string) Plan {
	var plan Plan
	var liveDisks []libvirtxml.DomainDisk
	var liveIfaces []libvirtxml.DomainInterface
	if live.Devices != nil {
		liveDisks, liveIfaces = live.Devices.Disks, live.Devices.Interfaces
	}
	haveDisk := byAlias(liveDisks, diskAlias)
	wantDisk := byAlias(want, diskAlias)

	inVMI := map[string]bool{}
	for _, d := range v.Spec.Domain.Devices.Disks {
		inVMI[d.Name] = true
	}
	hasVolume := map[string]bool{}
	for _, vol := range v.Spec.Volumes {
		hasVolume[vol.Name] = true
	}
	// Detach first: it frees the target names and SCSI units an attach
	// may take.
	for _, d := range liveDisks {
		name, ok := userAlias(d.Alias)
		if !ok || inVMI[name] || !underDir(diskSourcePath(&d), hotplugDir) || d.Device == "cdrom" {
			continue
		}
		if bus := diskBus(&d); !hotplugBus(bus) {
			plan.Unsupported = append(plan.Unsupported, fmt.Sprintf("disk %q: unplug from bus %s is not possible (only scsi and virtio disks can be unplugged)", name, bus))
			continue
		}
		plan.Detach = append(plan.Detach, d)
	}
	for _, d := range v.Spec.Domain.Devices.Disks {
		hot, mounted := facts.HotplugVolume(v, d.Name)
		have, defined := haveDisk[d.Name]
		w, wanted := wantDisk[d.Name]
		switch {
		case d.CDRom != nil && defined:
			// The medium changes to a mounted hotplug volume, or is
			// ejected when the VMI has no volume for the drive. A medium
			// from the start is left alone (its source as the converter
			// makes it without the define's facts may differ in form).
			var src *libvirtxml.DomainDiskSource
			switch {
			case hot && mounted && wanted:
				src = w.Source
			case hasVolume[d.Name]:
				continue // from the start, or on its way
			}
			if diskSourcePath(&have) == pathOf(src) {
				continue
			}
			changed := have
			changed.Source = src
			changed.BackingStore = nil
			if changed.Driver != nil {
				drv := *changed.Driver
				drv.Type = "raw"
				changed.Driver = &drv
			}
			plan.Media = append(plan.Media, changed)
		case !defined && hot && mounted && wanted:
			if bus := diskBus(&w); !hotplugBus(bus) {
				plan.Unsupported = append(plan.Unsupported, fmt.Sprintf("disk %q: hotplug on bus %s is not possible (use scsi or virtio)", d.Name, bus))
				continue
			}
			plan.Attach = append(plan.Attach, w)
		}
	}

	plan.Grow = growCandidates(v, liveDisks, plan.Detach)

	planInterfaces(&plan, v, liveIfaces, attach)
	planPorts(&plan, live)
	return plan
}

// planPorts refuses the PCIe hotplugs (virtio disks, interfaces) beyond
// the free pcie-root-ports of the live domain, naming each device that
// does not fit, so that a Sync asking for more than there is room for
// changes nothing (libvirt would fail in the middle, after the first
// ones). Off q35 (no root ports at all) libvirt decides.
func planPorts(plan *Plan, live *libvirtxml.Domain) {
	var pcie []string
	for _, d := range plan.Attach {
		if diskBus(&d) == "virtio" {
			n, _ := userAlias(d.Alias)
			pcie = append(pcie, fmt.Sprintf("disk %q", n))
		}
	}
	for _, n := range plan.Plug {
		pcie = append(pcie, fmt.Sprintf("interface %q", n))
	}
	if len(pcie) == 0 {
		return // the usual Sync: no need to read the whole domain
	}
	free, ports := freeRootPorts(live)
	if len(pcie) <= free || ports == 0 {
		return
	}
	plan.Unsupported = append(plan.Unsupported, fmt.Sprintf("%s: no free PCIe root port to plug into (%d free for %d devices to plug; the VM has %d ports)",
		strings.Join(pcie[free:], ", "), free, len(pcie), ports))
}

// freeRootPorts counts the live domain's pcie-root-ports that take a
// hotplug and have no device on them, and all its pcie-root-ports.
func freeRootPorts(live *libvirtxml.Domain) (free, ports int) {
	if live.Devices == nil {
		return 0, 0
	}
	x, err := live.Marshal()
	if err != nil {
		return 0, 0
	}
	used := map[uint]bool{}
	dec := xml.NewDecoder(strings.NewReader(x))
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		el, ok := tok.(xml.StartElement)
		if !ok || el.Name.Local != "address" {
			continue
		}
		var pci bool
		var bus string
		for _, a := range el.Attr {
			switch a.Name.Local {
			case "type":
				pci = a.Value == "pci"
			case "bus":
				bus = a.Value
			}
		}
		if n, err := strconv.ParseUint(bus, 0, 32); pci && err == nil {
			used[uint(n)] = true
		}
	}
	for _, c := range live.Devices.Controllers {
		if c.Type != "pci" || c.Model != "pcie-root-port" || c.Index == nil {
			continue
		}
		ports++
		if c.PCI != nil && c.PCI.Target != nil && c.PCI.Target.Hotplug == "off" {
			continue
		}
		if !used[*c.Index] {
			free++
		}
	}
	return free, ports
}

// planInterfaces adds the interface changes to plan, as KubeVirt's
// launcher makes them: an interface whose state is absent is unplugged
// when its tap is the hashed one of a Multus network (the only kind
// KubeVirt plugs); an interface the domain lacks is plugged once the VMI
// status reports its pod interface (info source multus-status), and only
// with the bridge binding or a binding plugin attached as a tap; until
// then there is nothing to do, as for a volume not mounted yet. A link
// state that differs is set, except on a binding plugin's interface its
// sidecar made (the launcher's domain has none to compare with).
func planInterfaces(plan *Plan, v *v1.VirtualMachineInstance, liveIfaces []libvirtxml.DomainInterface, attach map[string]string) {
	haveIface := byAlias(liveIfaces, func(i libvirtxml.DomainInterface) *libvirtxml.DomainAlias { return i.Alias })
	networks := map[string]*v1.Network{}
	for i := range v.Spec.Networks {
		networks[v.Spec.Networks[i].Name] = &v.Spec.Networks[i]
	}
	inPod := map[string]bool{}
	for _, st := range v.Status.Interfaces {
		for _, src := range strings.Split(st.InfoSource, ",") {
			if strings.TrimSpace(src) == infoSourceMultus {
				inPod[st.Name] = true
			}
		}
	}
	for _, iface := range v.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV != nil {
			continue // a host device, not an <interface>
		}
		have, defined := haveIface[iface.Name]
		netw := networks[iface.Name]
		hotpluggable := netw != nil && netw.Multus != nil && !netw.Multus.Default
		tapAttached := iface.Bridge != nil || (iface.Binding != nil && attach[iface.Name] == "tap")
		switch {
		case iface.State == v1.InterfaceStateAbsent && defined:
			tap := ""
			if have.Target != nil {
				tap = have.Target.Dev
			}
			if !hotpluggable || tap != network.TapName(netw, "") {
				plan.Unsupported = append(plan.Unsupported, fmt.Sprintf("interface %q: unplug is possible only for an interface on a secondary network with a hashed tap name, not tap %q", iface.Name, tap))
				continue
			}
			plan.Unplug = append(plan.Unplug, have)
		case iface.State == v1.InterfaceStateAbsent:
		case !defined && !inPod[iface.Name]:
			// Its pod interface is not there yet: virt-handler syncs again
			// once Multus has added it.
		case !defined && (!tapAttached || !hotpluggable):
			plan.Unsupported = append(plan.Unsupported, fmt.Sprintf("interface %q: hotplug is possible only with the bridge binding or a binding plugin attached as a tap, on a secondary (Multus) network", iface.Name))
		case !defined:
			plan.Plug = append(plan.Plug, iface.Name)
		case iface.Binding != nil && !tapAttached:
			// Its sidecar's interface: KubeVirt leaves its link alone.
		default:
			wantDown := iface.State == v1.InterfaceStateLinkDown
			haveDown := have.Link != nil && have.Link.State == "down"
			if wantDown != haveDown {
				changed := have
				changed.Link = &libvirtxml.DomainInterfaceLink{State: linkWord(wantDown)}
				plan.Links = append(plan.Links, changed)
			}
		}
	}
}

// infoSourceMultus is the info source of a VMI status interface that
// Multus reports in the pod (KubeVirt's vmispec.InfoSourceMultusStatus).
const infoSourceMultus = "multus-status"

// PinLiveTargets returns a copy of v whose volume status names the target
// each of its disks has in the live domain, so that the converter keeps
// those names and gives a new disk one that is free, as virt-handler's
// status would once it has caught up.
func PinLiveTargets(v *v1.VirtualMachineInstance, live *libvirtxml.Domain) *v1.VirtualMachineInstance {
	out := v.DeepCopy()
	if live.Devices == nil {
		return out
	}
	status := map[string]int{}
	for i, st := range out.Status.VolumeStatus {
		status[st.Name] = i
	}
	for _, d := range live.Devices.Disks {
		name, ok := userAlias(d.Alias)
		if !ok || d.Target == nil || d.Target.Dev == "" {
			continue
		}
		if i, ok := status[name]; ok {
			out.Status.VolumeStatus[i].Target = d.Target.Dev
			continue
		}
		// A disk that is live but gone from the VMI still holds its name
		// until it is detached.
		out.Status.VolumeStatus = append(out.Status.VolumeStatus, v1.VolumeStatus{Name: name, Target: d.Target.Dev})
	}
	return out
}

// definitionDrift lists the hotplugged disks (a user alias, a source in
// hotplugDir, not a CD-ROM drive) on which the domain's definition (def)
// and the running domain (live) disagree: drop are in the definition only,
// add in the running domain only. libvirt changes the running domain
// first and writes the definition after it; a daemon that dies in between
// (killed during a hotplug or an unplug) leaves them apart, and its
// successor keeps them so. Left alone, an attach of the same volume later
// fails on the definition's duplicate alias, and a reboot from the
// definition would bring back a disk the VMI no longer has. Pure.
func definitionDrift(live, def *libvirtxml.Domain, hotplugDir string) (drop, add []libvirtxml.DomainDisk) {
	hotDisks := func(dom *libvirtxml.Domain) (map[string]bool, []libvirtxml.DomainDisk) {
		names := map[string]bool{}
		var out []libvirtxml.DomainDisk
		if dom == nil || dom.Devices == nil {
			return names, nil
		}
		for _, d := range dom.Devices.Disks {
			if name, ok := userAlias(d.Alias); ok && d.Device != "cdrom" && underDir(diskSourcePath(&d), hotplugDir) {
				names[name] = true
				out = append(out, d)
			}
		}
		return names, out
	}
	inLive, liveDisks := hotDisks(live)
	inDef, defDisks := hotDisks(def)
	for _, d := range defDisks {
		if name, _ := userAlias(d.Alias); !inLive[name] {
			drop = append(drop, d)
		}
	}
	for _, d := range liveDisks {
		if name, _ := userAlias(d.Alias); !inDef[name] {
			add = append(add, d)
		}
	}
	return drop, add
}
