package storage

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	vmipkg "github.com/virtlauncher/virtlauncher/internal/vmi"
)

func fileSource(path string) *libvirtxml.DomainDiskSource {
	return &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}
}

func blockSource(dev string) *libvirtxml.DomainDiskSource {
	return &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: dev}}
}

// source sets the disk's source, format and backing store from its volume.
// Every path comes from the layout; block or file and the backing format come
// from the Context's volume facts.
func (s configurator) source(vmi *v1.VirtualMachineInstance, vol *v1.Volume, volIndex int, out *libvirtxml.DomainDisk, dev device) error {
	l := s.ctx.Layout
	vf := s.ctx.Volumes[vol.Name]
	field := fmt.Sprintf("spec.volumes[%d]", volIndex)
	if err := layout.CheckName(vol.Name); err != nil {
		return fmt.Errorf("%s.name: %w", field, err)
	}
	var src *libvirtxml.DomainDiskSource
	format := "raw"
	n := 0
	set := func(sr *libvirtxml.DomainDiskSource, f string) {
		n++
		src, format = sr, f
	}
	pvc := func(hotplug bool) *libvirtxml.DomainDiskSource {
		switch {
		case hotplug && vf.Block:
			return blockSource(l.HotplugBlock(vol.Name))
		case hotplug:
			return fileSource(l.HotplugFile(vol.Name))
		case vf.Block:
			return blockSource(l.BlockDevice(vol.Name))
		}
		return fileSource(l.PVCDisk(vol.Name))
	}
	if v := vol.ContainerDisk; v != nil {
		backing, err := backingFormat(vf.BackingFormat, field)
		if err != nil {
			return err
		}
		set(fileSource(l.DiskOverlay(vol.Name)), "qcow2")
		out.BackingStore = &libvirtxml.DomainDiskBackingStore{
			Format: &libvirtxml.DomainDiskFormat{Type: backing},
			Source: fileSource(l.ContainerDiskImage(volIndex)),
		}
	}
	if v := vol.Ephemeral; v != nil {
		if v.PersistentVolumeClaim == nil {
			return fmt.Errorf("%s.ephemeral.persistentVolumeClaim: must be set", field)
		}
		set(fileSource(l.DiskOverlay(vol.Name)), "qcow2")
		out.BackingStore = &libvirtxml.DomainDiskBackingStore{
			Format: &libvirtxml.DomainDiskFormat{Type: "raw"},
			Source: pvc(false),
		}
	}
	if v := vol.PersistentVolumeClaim; v != nil {
		set(pvc(v.Hotpluggable), "raw")
	}
	if v := vol.DataVolume; v != nil {
		set(pvc(v.Hotpluggable), "raw")
	}
	if v := vol.HostDisk; v != nil {
		if v.Path == "" {
			return fmt.Errorf("%s.hostDisk.path: must be set", field)
		}
		path, err := l.HostDisk(vol.Name, v.Path)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		set(fileSource(path), "raw")
	}
	if vol.EmptyDisk != nil {
		set(fileSource(l.EmptyDisk(vol.Name)), "qcow2")
	}
	if vol.CloudInitNoCloud != nil {
		set(fileSource(l.CloudInitNoCloudISO(namespace(vmi), vmi.Name)), "raw")
	}
	if vol.CloudInitConfigDrive != nil {
		set(fileSource(l.CloudInitConfigDriveISO(namespace(vmi), vmi.Name)), "raw")
	}
	if vol.ConfigMap != nil {
		set(fileSource(l.ConfigMapISO(vol.Name)), "raw")
	}
	if vol.Secret != nil {
		set(fileSource(l.SecretISO(vol.Name)), "raw")
	}
	if vol.DownwardAPI != nil {
		set(fileSource(l.DownwardAPIISO(vol.Name)), "raw")
	}
	if vol.ServiceAccount != nil {
		set(fileSource(l.ServiceAccountISO()), "raw")
	}
	if vol.Sysprep != nil {
		set(fileSource(l.SysprepISO(vol.Name)), "raw")
	}
	if vol.DownwardMetrics != nil {
		if dev.kind != "disk" || dev.bus != v1.DiskBusVirtio {
			return fmt.Errorf("%s.downwardMetrics: needs a disk on the virtio bus", field)
		}
		set(fileSource(l.DownwardMetricsDisk()), "raw")
		out.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	if vol.MemoryDump != nil {
		return fmt.Errorf("%s.memoryDump: not supported as a disk", field)
	}
	if vol.ContainerPath != nil {
		return fmt.Errorf("%s.containerPath: not supported as a disk (it is a filesystem)", field)
	}
	switch n {
	case 0:
		return fmt.Errorf("%s: no volume source set", field)
	case 1:
	default:
		return fmt.Errorf("%s: only one volume source may be set, found %d", field, n)
	}
	if vmipkg.CBTEnabled(vmi) && vmipkg.CBTVolume(vol) && !vmipkg.CBTHotplugged(vol) {
		if src.Block != nil {
			return fmt.Errorf("%s: changed block tracking needs a filesystem volume: libvirt 9.0 cannot give a block device's overlay its data file", field)
		}
		// The overlay carries the raw image as its external data file (in
		// its header: libvirt 9.0 has no <dataStore>), so the guest's
		// writes still land in the image and QEMU keeps the backup
		// bitmaps in the overlay.
		src, format = fileSource(l.CBTOverlay(vol.Name, !s.ctx.NonRoot)), "qcow2"
	}
	out.Source = src
	out.Driver.Type = format
	return nil
}

// CBTDataFile is the raw image a tracked volume's overlay keeps its data
// in: where the volume's image is reached without tracking.
func CBTDataFile(l layout.Layout, vol *v1.Volume) (string, error) {
	switch {
	case vol.HostDisk != nil:
		return l.HostDisk(vol.Name, vol.HostDisk.Path)
	case vol.PersistentVolumeClaim != nil, vol.DataVolume != nil:
		return l.PVCDisk(vol.Name), nil
	}
	return "", fmt.Errorf("volume %s is not tracked by changed block tracking", vol.Name)
}

func backingFormat(f, field string) (string, error) {
	switch f {
	case "":
		return "raw", nil
	case "raw", "qcow2":
		return f, nil
	}
	return "", fmt.Errorf("%s.containerDisk: image format %q is not raw or qcow2", field, f)
}

func namespace(vmi *v1.VirtualMachineInstance) string {
	if vmi.Namespace == "" {
		return "default"
	}
	return vmi.Namespace
}

// CBTDataFiles maps the overlay of each volume the VMI tracks to the
// volume's raw image, the overlay's data file (nil when nothing is
// tracked).
func CBTDataFiles(l layout.Layout, root bool, vmi *v1.VirtualMachineInstance) map[string]string {
	if !vmipkg.CBTEnabled(vmi) {
		return nil
	}
	out := map[string]string{}
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if !vmipkg.CBTVolume(vol) || vmipkg.CBTHotplugged(vol) {
			continue
		}
		if data, err := CBTDataFile(l, vol); err == nil {
			out[l.CBTOverlay(vol.Name, root)] = data
		}
	}
	return out
}
