package vmi

import (
	"encoding/base64"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"
)

// Checks of volumes, disks and filesystems.

func volumeSourceCount(vol v1.Volume) int {
	s := vol.VolumeSource
	n := 0
	for _, set := range []bool{
		s.HostDisk != nil, s.PersistentVolumeClaim != nil, s.CloudInitNoCloud != nil,
		s.CloudInitConfigDrive != nil, s.Sysprep != nil, s.ContainerDisk != nil, s.Ephemeral != nil,
		s.EmptyDisk != nil, s.DataVolume != nil, s.ConfigMap != nil, s.Secret != nil,
		s.DownwardAPI != nil, s.ServiceAccount != nil, s.DownwardMetrics != nil, s.MemoryDump != nil,
	} {
		if set {
			n++
		}
	}
	return n
}

func (v *validator) volumes() {
	const p = "spec.volumes"
	vols := v.spec.Volumes
	if len(vols) > maxItems {
		v.fail(p, "%d volumes, at most %d allowed", len(vols), maxItems)
	}
	seen := map[string]int{}
	for i, vol := range vols {
		vp := idx(p, i, "")
		v.dnsLabel(vp+".name", vol.Name)
		if j, dup := seen[vol.Name]; dup && vol.Name != "" {
			v.fail(vp+".name", "%q is already the name of %s", vol.Name, idx(p, j, ""))
		} else {
			seen[vol.Name] = i
		}
		switch n := volumeSourceCount(vol); {
		case n == 0:
			v.fail(vp, "no volume source set (e.g. containerDisk, emptyDisk, cloudInitNoCloud, persistentVolumeClaim)")
			continue
		case n > 1:
			v.fail(vp, "%d volume sources set; want exactly one", n)
			continue
		}
		s := vol.VolumeSource
		switch {
		case s.ContainerDisk != nil:
			if s.ContainerDisk.Image == "" {
				v.fail(vp+".containerDisk.image", "required")
			}
			v.absPath(vp+".containerDisk.path", s.ContainerDisk.Path, false)
		case s.HostDisk != nil:
			hd := s.HostDisk
			v.absPath(vp+".hostDisk.path", hd.Path, true)
			switch hd.Type {
			case v1.HostDiskExists:
			case v1.HostDiskExistsOrCreate:
				if hd.Capacity.Sign() <= 0 {
					v.fail(vp+".hostDisk.capacity", "required and positive for type DiskOrCreate")
				}
			case "":
				v.fail(vp+".hostDisk.type", "required: Disk or DiskOrCreate")
			default:
				v.fail(vp+".hostDisk.type", "%q is not Disk or DiskOrCreate", truncate(string(hd.Type), 40))
			}
			v.capacity(vp+".hostDisk.capacity", hd.Capacity, false)
		case s.EmptyDisk != nil:
			v.capacity(vp+".emptyDisk.capacity", s.EmptyDisk.Capacity, true)
		case s.CloudInitNoCloud != nil:
			c := s.CloudInitNoCloud
			v.cloudInit(vp+".cloudInitNoCloud", c.UserData, c.UserDataBase64, c.UserDataSecretRef != nil,
				c.NetworkData, c.NetworkDataBase64, c.NetworkDataSecretRef != nil)
		case s.CloudInitConfigDrive != nil:
			c := s.CloudInitConfigDrive
			v.cloudInit(vp+".cloudInitConfigDrive", c.UserData, c.UserDataBase64, c.UserDataSecretRef != nil,
				c.NetworkData, c.NetworkDataBase64, c.NetworkDataSecretRef != nil)
		case s.PersistentVolumeClaim != nil:
			if s.PersistentVolumeClaim.ClaimName == "" {
				v.fail(vp+".persistentVolumeClaim.claimName", "required")
			}
		case s.Ephemeral != nil:
			if s.Ephemeral.PersistentVolumeClaim == nil || s.Ephemeral.PersistentVolumeClaim.ClaimName == "" {
				v.fail(vp+".ephemeral.persistentVolumeClaim.claimName", "required")
			}
		case s.DataVolume != nil:
			if s.DataVolume.Name == "" {
				v.fail(vp+".dataVolume.name", "required")
			}
		case s.ConfigMap != nil:
			if s.ConfigMap.Name == "" {
				v.fail(vp+".configMap.name", "required")
			}
		case s.Secret != nil:
			if s.Secret.SecretName == "" {
				v.fail(vp+".secret.secretName", "required")
			}
		}
	}
}

func (v *validator) capacity(field string, q resource.Quantity, required bool) {
	switch {
	case q.IsZero() && !required:
	case q.Sign() <= 0:
		v.fail(field, "must be positive, got %s", q.String())
	case q.Cmp(*resource.NewQuantity(MaxDiskCapacityBytes, resource.BinarySI)) > 0:
		v.fail(field, "%s is more than the 1Pi allowed", q.String())
	}
}

func (v *validator) cloudInit(p, user, user64 string, userRef bool, network, network64 string, networkRef bool) {
	check := func(kind, plain, b64 string, ref bool, plainField, b64Field, refField string) {
		n := 0
		for _, set := range []bool{plain != "", b64 != "", ref} {
			if set {
				n++
			}
		}
		if n > 1 {
			v.fail(p, "set only one of %s, %s and %s", plainField, b64Field, refField)
		}
		size := len(plain)
		field := p + "." + plainField
		if b64 != "" {
			field = p + "." + b64Field
			dec, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				v.fail(field, "invalid base64: %v", err)
				return
			}
			size = len(dec)
		}
		if size > MaxCloudInitBytes {
			v.fail(field, "%s is %d bytes, more than the %d allowed", kind, size, MaxCloudInitBytes)
		}
	}
	check("user data", user, user64, userRef, "userData", "userDataBase64", "secretRef")
	check("network data", network, network64, networkRef, "networkData", "networkDataBase64", "networkDataSecretRef")
	if user == "" && user64 == "" && !userRef && network == "" && network64 == "" && !networkRef {
		v.fail(p, "needs userData or networkData (inline, base64 or a Secret reference)")
	}
}

func (v *validator) dnsLabel(field, name string) {
	if name == "" {
		v.fail(field, "required")
		return
	}
	for _, msg := range validation.IsDNS1123Label(name) {
		v.fail(field, "%q is not a valid name: %s", truncate(name, 80), msg)
	}
}

func diskTarget(d v1.Disk) (kind string, bus v1.DiskBus, n int) {
	if d.LUN != nil {
		kind, bus, n = "lun", d.LUN.Bus, n+1
	}
	if d.CDRom != nil {
		kind, bus, n = "cdrom", d.CDRom.Bus, n+1
	}
	if d.Disk != nil {
		kind, bus, n = "disk", d.Disk.Bus, n+1
	}
	return kind, bus, n
}

func (v *validator) disks() {
	const p = "spec.domain.devices.disks"
	disks := v.spec.Domain.Devices.Disks
	if len(disks) > maxItems {
		v.fail(p, "%d disks, at most %d allowed", len(disks), maxItems)
	}
	volumes := map[string]bool{}
	for _, vol := range v.spec.Volumes {
		volumes[vol.Name] = true
	}
	seen := map[string]int{}
	for i, d := range disks {
		dp := idx(p, i, "")
		v.dnsLabel(dp+".name", d.Name)
		if j, dup := seen[d.Name]; dup && d.Name != "" {
			v.fail(dp+".name", "%q is already the name of %s", d.Name, idx(p, j, ""))
		} else {
			seen[d.Name] = i
		}
		kind, bus, n := diskTarget(d)
		if n > 1 {
			v.fail(dp, "set only one of disk, cdrom and lun")
		}
		if !volumes[d.Name] && d.Name != "" && kind != "cdrom" {
			v.fail(dp+".name", "%q has no matching volume", d.Name)
		}
		if kind != "" {
			bp := dp + "." + kind + ".bus"
			switch bus {
			case "": // not defaulted yet
			case v1.DiskBusVirtio:
				if kind == "cdrom" {
					v.fail(bp, "virtio is not valid for a CD-ROM (use sata or scsi)")
				}
			case v1.DiskBusSATA:
				if d.Disk != nil && d.Disk.ReadOnly {
					v.fail(dp+".disk.readonly", "a sata disk cannot be read-only (use virtio or scsi, or a cdrom)")
				}
			case v1.DiskBusSCSI, v1.DiskBusUSB:
			default:
				v.fail(bp, "%q is not one of virtio, sata, scsi, usb", truncate(string(bus), 40))
			}
			if d.DedicatedIOThread != nil && *d.DedicatedIOThread && bus != v1.DiskBusVirtio && bus != "" {
				v.fail(dp+".dedicatedIOThread", "needs the virtio bus, not %s", bus)
			}
		}
		if d.Disk != nil && d.Disk.PciAddress != "" {
			if bus != v1.DiskBusVirtio && bus != "" {
				v.fail(dp+".disk.pciAddress", "only possible on the virtio bus")
			}
			if !pciAddressRE.MatchString(d.Disk.PciAddress) {
				v.fail(dp+".disk.pciAddress", "%q is not a PCI address of the form 0000:00:1f.0", truncate(d.Disk.PciAddress, 40))
			}
		}
		if d.Serial != "" {
			if !serialRE.MatchString(d.Serial) {
				v.fail(dp+".serial", "%q may contain only A-Z a-z 0-9 _ . + -", truncate(d.Serial, 40))
			}
			if len(d.Serial) > maxSerialLength {
				v.fail(dp+".serial", "longer than %d characters", maxSerialLength)
			}
		}
		switch d.Cache {
		case "", v1.CacheNone, v1.CacheWriteThrough, v1.CacheWriteBack:
		default:
			v.fail(dp+".cache", "%q is not one of none, writethrough, writeback", truncate(string(d.Cache), 40))
		}
		switch d.IO {
		case "", v1.IONative, v1.IOThreads:
		default:
			v.fail(dp+".io", "%q is not one of native, threads", truncate(string(d.IO), 40))
		}
		if ep := d.ErrorPolicy; ep != nil {
			switch *ep {
			case v1.DiskErrorPolicyStop, v1.DiskErrorPolicyIgnore, v1.DiskErrorPolicyReport, v1.DiskErrorPolicyEnospace:
			default:
				v.fail(dp+".errorPolicy", "%q is not one of stop, ignore, report, enospace", truncate(string(*ep), 40))
			}
		}
		if d.CDRom != nil {
			switch d.CDRom.Tray {
			case "", v1.TrayStateOpen, v1.TrayStateClosed:
			default:
				v.fail(dp+".cdrom.tray", "%q is not open or closed", truncate(string(d.CDRom.Tray), 40))
			}
		}
		if bs := d.BlockSize; bs != nil && bs.Custom != nil {
			c := bs.Custom
			for _, s := range []struct {
				name string
				val  uint
			}{{"logical", c.Logical}, {"physical", c.Physical}} {
				if s.val < 512 || s.val > 2<<20 || s.val&(s.val-1) != 0 {
					v.fail(dp+".blockSize.custom."+s.name, "%d is not a power of two between 512 and 2Mi", s.val)
				}
			}
			if c.Logical > c.Physical {
				v.fail(dp+".blockSize.custom.logical", "%d is more than physical (%d)", c.Logical, c.Physical)
			}
		}
	}
}

func (v *validator) filesystems() {
	const p = "spec.domain.devices.filesystems"
	volumes := map[string]bool{}
	for _, vol := range v.spec.Volumes {
		volumes[vol.Name] = true
	}
	disks := map[string]bool{}
	for _, d := range v.spec.Domain.Devices.Disks {
		disks[d.Name] = true
	}
	seen := map[string]bool{}
	for i, fs := range v.spec.Domain.Devices.Filesystems {
		fp := idx(p, i, "")
		v.dnsLabel(fp+".name", fs.Name)
		switch {
		case seen[fs.Name]:
			v.fail(fp+".name", "%q is used by another filesystem", fs.Name)
		case fs.Name != "" && !volumes[fs.Name]:
			v.fail(fp+".name", "%q has no matching volume", fs.Name)
		case disks[fs.Name]:
			v.fail(fp+".name", "volume %q is used by a disk too", fs.Name)
		}
		seen[fs.Name] = true
		if fs.Virtiofs == nil {
			v.fail(fp+".virtiofs", "required")
		}
	}
}
