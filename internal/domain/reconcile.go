package domain

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// unappliedChanges lists, one message per device, what the VMI asks of a
// defined domain that Sync does not carry out: hotplug and unplug of disks
// (volumes virt-handler mounted into the pod, or took away), CD-ROM media
// inserted or ejected, interfaces added or removed. (Link state it does:
// planChanges.)
// KubeVirt's launcher applies these on every Sync; a Sync that answered
// success for them would leave virt-handler waiting forever for a volume
// that never appears in the guest, or, on unplug, unmounting a volume that
// QEMU still has open. So until each kind is implemented (issue 16), Sync
// fails and says which device and why.
//
// It is pure: live is the domain's XML as libvirt has it now, hotplugDir
// the directory virt-handler mounts hotplugged volumes into.
func unappliedChanges(v *v1.VirtualMachineInstance, live *libvirtxml.Domain, hotplugDir string) []string {
	return planChanges(v, live, hotplugDir).unsupported
}

// changePlan is what Sync must do to a defined domain for the VMI: the
// changes it carries out, and the ones it cannot (yet), one message per
// device.
type changePlan struct {
	// links are interfaces whose link state must change: the live
	// interface with its new <link state>.
	links       []libvirtxml.DomainInterface
	unsupported []string
}

// planChanges diffs the VMI against the live domain (see
// unappliedChanges for what it looks at).
func planChanges(v *v1.VirtualMachineInstance, live *libvirtxml.Domain, hotplugDir string) changePlan {
	var plan changePlan
	var out []string
	if live.Devices == nil {
		live.Devices = &libvirtxml.DomainDeviceList{}
	}
	liveDisks := map[string]*libvirtxml.DomainDisk{}
	for i := range live.Devices.Disks {
		if name, ok := userAlias(live.Devices.Disks[i].Alias); ok {
			liveDisks[name] = &live.Devices.Disks[i]
		}
	}
	volumes := map[string]*v1.Volume{}
	for i := range v.Spec.Volumes {
		volumes[v.Spec.Volumes[i].Name] = &v.Spec.Volumes[i]
	}
	status := map[string]*v1.VolumeStatus{}
	for i := range v.Status.VolumeStatus {
		status[v.Status.VolumeStatus[i].Name] = &v.Status.VolumeStatus[i]
	}
	// ready: a hotplugged volume virt-handler has mounted into the pod;
	// before that, KubeVirt's launcher waits too.
	hotplug := func(name string) (isHotplug, ready bool) {
		st := status[name]
		if st == nil || st.HotplugVolume == nil {
			return false, false
		}
		return true, st.Phase == v1.HotplugVolumeMounted || st.Phase == v1.VolumeReady
	}

	wanted := map[string]bool{}
	for _, d := range v.Spec.Domain.Devices.Disks {
		wanted[d.Name] = true
		isHotplug, ready := hotplug(d.Name)
		have, defined := liveDisks[d.Name]
		switch {
		case d.CDRom != nil && defined:
			_, hasVolume := volumes[d.Name]
			wantMedia := hasVolume && (!isHotplug || ready)
			if isHotplug && !ready {
				continue // the medium is on its way
			}
			if haveMedia := diskHasMedia(have); wantMedia != haveMedia {
				verb := "inserting"
				if !wantMedia {
					verb = "ejecting"
				}
				out = append(out, fmt.Sprintf("disk %q: %s a CD-ROM medium in a running domain is not supported yet", d.Name, verb))
			}
		case !defined && isHotplug && ready:
			out = append(out, fmt.Sprintf("disk %q: hotplug of volume %q into a running domain is not supported yet", d.Name, d.Name))
		}
	}
	for name, d := range liveDisks {
		if !wanted[name] && underDir(diskSourcePath(d), hotplugDir) {
			out = append(out, fmt.Sprintf("disk %q: unplug of a hotplugged volume is not supported yet", name))
		}
	}

	liveIfaces := map[string]*libvirtxml.DomainInterface{}
	for i := range live.Devices.Interfaces {
		if name, ok := userAlias(live.Devices.Interfaces[i].Alias); ok {
			liveIfaces[name] = &live.Devices.Interfaces[i]
		}
	}
	for _, iface := range v.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV != nil {
			continue // a host device, not an <interface>
		}
		have, defined := liveIfaces[iface.Name]
		switch {
		case iface.State == v1.InterfaceStateAbsent && defined:
			out = append(out, fmt.Sprintf("interface %q: unplug from a running domain is not supported yet", iface.Name))
		case iface.State == v1.InterfaceStateAbsent:
		case !defined:
			out = append(out, fmt.Sprintf("interface %q: hotplug into a running domain is not supported yet", iface.Name))
		default:
			wantDown := iface.State == v1.InterfaceStateLinkDown
			haveDown := have.Link != nil && have.Link.State == "down"
			if wantDown != haveDown {
				changed := *have
				changed.Link = &libvirtxml.DomainInterfaceLink{State: linkWord(wantDown)}
				plan.links = append(plan.links, changed)
			}
		}
	}
	plan.unsupported = out
	return plan
}

func linkWord(down bool) string {
	if down {
		return string(v1.InterfaceStateLinkDown)
	}
	return string(v1.InterfaceStateLinkUp)
}

// userAlias returns the VMI name behind a launcher-chosen alias ("ua-").
func userAlias(a *libvirtxml.DomainAlias) (string, bool) {
	if a == nil {
		return "", false
	}
	return strings.CutPrefix(a.Name, domainjson.UserAliasPrefix)
}

func diskSourcePath(d *libvirtxml.DomainDisk) string {
	switch {
	case d.Source == nil:
		return ""
	case d.Source.File != nil:
		return d.Source.File.File
	case d.Source.Block != nil:
		return d.Source.Block.Dev
	}
	return ""
}

func diskHasMedia(d *libvirtxml.DomainDisk) bool { return diskSourcePath(d) != "" }

func underDir(path, dir string) bool {
	return dir != "" && path != "" && strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
