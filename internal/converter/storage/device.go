package storage

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// device is what the spec says about the guest side of one disk.
type device struct {
	kind        string // disk, lun or cdrom
	bus         v1.DiskBus
	readOnly    bool
	tray        string
	reservation bool
	pciAddress  string
}

// deviceOf reads the disk/lun/cdrom target of a spec disk, with KubeVirt's
// defaults (bus sata on amd64, virtio elsewhere; CD-ROMs read-only, closed).
func deviceOf(vmi *v1.VirtualMachineInstance, c *facts.Context, d v1.Disk, field string) (device, error) {
	n := 0
	var dev device
	if t := d.Disk; t != nil {
		n++
		dev = device{kind: "disk", bus: t.Bus, readOnly: t.ReadOnly, pciAddress: t.PciAddress}
	}
	if t := d.LUN; t != nil {
		n++
		dev = device{kind: "lun", bus: t.Bus, readOnly: t.ReadOnly, reservation: t.Reservation}
	}
	if t := d.CDRom; t != nil {
		n++
		dev = device{kind: "cdrom", bus: t.Bus, readOnly: t.ReadOnly == nil || *t.ReadOnly, tray: string(t.Tray)}
		if dev.tray == "" {
			dev.tray = string(v1.TrayStateClosed)
		}
		if dev.tray != string(v1.TrayStateClosed) && dev.tray != string(v1.TrayStateOpen) {
			return dev, fmt.Errorf("%s.cdrom.tray: %q is not open or closed", field, dev.tray)
		}
	}
	switch n {
	case 0:
		dev = device{kind: "disk"}
	case 1:
	default:
		return dev, fmt.Errorf("%s: only one of disk, lun and cdrom may be set", field)
	}
	if dev.bus == "" {
		dev.bus = v1.DiskBusSATA
		if facts.Arch(vmi, c) != "amd64" {
			dev.bus = v1.DiskBusVirtio
		}
	}
	switch dev.bus {
	case v1.DiskBusVirtio, v1.DiskBusSATA, v1.DiskBusSCSI, v1.DiskBusUSB:
	default:
		return dev, fmt.Errorf("%s.%s.bus: %q is not one of virtio, sata, scsi, usb", field, dev.kind, dev.bus)
	}
	if dev.kind == "cdrom" && dev.bus == v1.DiskBusVirtio {
		return dev, fmt.Errorf("%s.cdrom.bus: virtio cannot hold removable media, use sata or scsi", field)
	}
	if dev.kind == "lun" && dev.bus != v1.DiskBusSCSI {
		return dev, fmt.Errorf("%s.lun.bus: a LUN needs the scsi bus, not %q", field, dev.bus)
	}
	if dev.pciAddress != "" && dev.bus != v1.DiskBusVirtio {
		return dev, fmt.Errorf("%s.disk.pciAddress: only a disk on the virtio bus can have a PCI address, not one on %q", field, dev.bus)
	}
	if dev.reservation && dev.kind != "lun" {
		return dev, fmt.Errorf("%s: reservation is only for LUNs", field)
	}
	return dev, nil
}
