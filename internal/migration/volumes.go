package migration

import (
	"errors"
	"fmt"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// localToMigrate are the volumes whose contents the migration copies to
// another volume (a PVC, DataVolume or hostDisk listed in
// status.migratedVolumes: a volume migration), by name.
func localToMigrate(v *v1.VirtualMachineInstance) map[string]bool {
	listed := map[string]bool{}
	for _, mv := range v.Status.MigratedVolumes {
		listed[mv.VolumeName] = true
	}
	out := map[string]bool{}
	for _, vol := range v.Spec.Volumes {
		s := vol.VolumeSource
		if (s.PersistentVolumeClaim != nil || s.DataVolume != nil || s.HostDisk != nil) && listed[vol.Name] {
			out[vol.Name] = true
		}
	}
	return out
}

// modeChange is how a migrated volume's mode changes, by volume name:
// "fs->block" or "block->fs"; volumes whose source or destination mode is
// not known are left out, as KubeVirt does.
func modeChange(v *v1.VirtualMachineInstance) map[string]string {
	out := map[string]string{}
	for _, mv := range v.Status.MigratedVolumes {
		src, dst := mv.SourcePVCInfo, mv.DestinationPVCInfo
		if src == nil || dst == nil || src.VolumeMode == nil || dst.VolumeMode == nil {
			continue
		}
		switch {
		case *src.VolumeMode == k8sv1.PersistentVolumeFilesystem && *dst.VolumeMode == k8sv1.PersistentVolumeBlock:
			out[mv.VolumeName] = "fs->block"
		case *src.VolumeMode == k8sv1.PersistentVolumeBlock && *dst.VolumeMode == k8sv1.PersistentVolumeFilesystem:
			out[mv.VolumeName] = "block->fs"
		}
	}
	return out
}

// MigratedVolumes edits the destination XML for the volumes a volume
// migration copies to new volumes (KubeVirt v1.9.0's
// configureLocalDiskToMigrate): each such disk's source (its data store's,
// when it has one) gets a storage slice of the source's virtual size
// (virtualSize of the source's path), so that a larger destination volume
// shows the guest the same disk; a filesystem volume going to a block one
// gets the block PVC's device node (the hotplug directory's for a
// hotplugged volume), and a block volume going to a filesystem one the
// PVC's disk.img (<hotplug dir>/<name>.img). A slice already there is kept.
// It reports whether it changed anything; every disk must have an alias.
func MigratedVolumes(dom *libvirtxml.Domain, v *v1.VirtualMachineInstance, l layout.Layout, virtualSize func(path string) (int64, error)) (bool, error) {
	if dom.Devices == nil {
		return false, nil
	}
	local := localToMigrate(v)
	change := modeChange(v)
	hotplug := map[string]bool{}
	for _, vol := range v.Spec.Volumes {
		if (vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.Hotpluggable) ||
			(vol.DataVolume != nil && vol.DataVolume.Hotpluggable) {
			hotplug[vol.Name] = true
		}
	}
	changed := false
	for i := range dom.Devices.Disks {
		d := &dom.Devices.Disks[i]
		if d.Alias == nil {
			return false, errors.New("migrated volumes: a disk without an alias")
		}
		name := domainjson.NewAlias(d.Alias.Name).Name
		if !local[name] {
			continue
		}
		src := d.Source
		if src == nil {
			return false, fmt.Errorf("migrated volume %s: its disk has no source", name)
		}
		if ds := src.DataStore; ds != nil && ds.Source != nil {
			src = ds.Source
		}
		path := ""
		switch {
		case src.File != nil:
			path = src.File.File
		case src.Block != nil:
			path = src.Block.Dev
		default:
			return false, fmt.Errorf("migrated volume %s: its disk is neither a file nor a block device", name)
		}
		if src.Slices == nil {
			size, err := virtualSize(path)
			if err != nil {
				return false, fmt.Errorf("migrated volume %s: %w", name, err)
			}
			if size <= 0 {
				return false, fmt.Errorf("migrated volume %s: virtual size %d of %s", name, size, path)
			}
			src.Slices = &libvirtxml.DomainDiskSlices{Slices: []libvirtxml.DomainDiskSlice{{Type: "storage", Offset: 0, Size: uint(size)}}}
		}
		switch change[name] {
		case "fs->block":
			dev := l.BlockDevice(name)
			if hotplug[name] {
				dev = l.HotplugBlock(name)
			}
			src.File, src.Block = nil, &libvirtxml.DomainDiskSourceBlock{Dev: dev}
		case "block->fs":
			file := l.PVCDisk(name)
			if hotplug[name] {
				file = l.HotplugFile(name)
			}
			src.Block, src.File = nil, &libvirtxml.DomainDiskSourceFile{File: file}
		}
		changed = true
	}
	return changed, nil
}
