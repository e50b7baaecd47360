// Package storage converts the VMI's disks and their volumes into <disk>
// elements: target names, bus, driver options and the source path of every
// volume type, all taken from the Context's layout and volume facts.
package storage

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// PRHelperSocket is where KubeVirt's persistent-reservation helper listens,
// relative to the share directory.
const PRHelperSocket = "daemons/pr/pr-helper.sock"

type configurator struct{ ctx *facts.Context }

// New returns the disk configurator.
func New(c *facts.Context) facts.Configurator { return configurator{ctx: c} }

func (s configurator) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	volumes := map[string]int{}
	for i, v := range vmi.Spec.Volumes {
		if _, dup := volumes[v.Name]; dup {
			return fmt.Errorf("spec.volumes[%d].name: %q is used twice", i, v.Name)
		}
		volumes[v.Name] = i
	}
	if p := vmi.Spec.Domain.IOThreadsPolicy; p != nil && *p == v1.IOThreadsPolicySupplementalPool {
		return fmt.Errorf("spec.domain.ioThreadsPolicy: supplementalPool is not supported (libvirt 9.0 has no per-disk iothread lists)")
	}
	names := newTargetNames(vmi)
	threads := newIOThreads(vmi)
	seen := map[string]bool{}
	for i, d := range vmi.Spec.Domain.Devices.Disks {
		field := fmt.Sprintf("spec.domain.devices.disks[%d]", i)
		if seen[d.Name] {
			return fmt.Errorf("%s.name: %q is used twice", field, d.Name)
		}
		seen[d.Name] = true
		idx, ok := volumes[d.Name]
		var vol *v1.Volume
		if ok {
			vol = &vmi.Spec.Volumes[idx]
		}
		if hot, mounted := facts.HotplugVolume(vmi, d.Name); hot && !mounted {
			// Not in the pod yet: a disk waits for its volume, a CD-ROM
			// drive is there without a medium.
			if d.CDRom == nil {
				continue
			}
			vol = nil
		}
		disk, err := s.disk(vmi, d, vol, idx, names, field)
		if err != nil {
			return err
		}
		threads.assign(&d, disk)
		dom.Devices.Disks = append(dom.Devices.Disks, *disk)
	}
	if n := threads.count(); n > 0 {
		dom.IOThreads = n
	}
	return nil
}

// disk builds one <disk> from the spec disk and its volume (nil for an empty
// CD-ROM drive).
func (s configurator) disk(vmi *v1.VirtualMachineInstance, d v1.Disk, vol *v1.Volume, volIndex int, names *targetNames, field string) (*libvirtxml.DomainDisk, error) {
	if err := layout.CheckName(d.Name); err != nil {
		return nil, fmt.Errorf("%s.name: %w", field, err)
	}
	dev, err := deviceOf(vmi, s.ctx, d, field)
	if err != nil {
		return nil, err
	}
	if vol == nil && dev.kind != "cdrom" {
		return nil, fmt.Errorf("%s: no volume named %q", field, d.Name)
	}
	out := &libvirtxml.DomainDisk{
		Device: dev.kind,
		Target: &libvirtxml.DomainDiskTarget{Bus: string(dev.bus)},
		Alias:  &libvirtxml.DomainAlias{Name: "ua-" + d.Name},
		Serial: d.Serial,
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", ErrorPolicy: string(v1.DiskErrorPolicyStop)},
	}
	if out.Target.Dev, err = names.next(d.Name, dev.bus); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if dev.kind == "cdrom" {
		out.Target.Tray = dev.tray
	}
	if dev.bus == v1.DiskBusSCSI {
		unit := uint(names.index(out.Target.Dev))
		out.Address = &libvirtxml.DomainAddress{Drive: &libvirtxml.DomainAddressDrive{
			Controller: new(uint), Bus: new(uint), Target: new(uint), Unit: &unit,
		}}
	}
	if dev.kind == "disk" && dev.bus == v1.DiskBusVirtio {
		out.Model = facts.VirtioModel(vmi, s.ctx)
	}
	if dev.pciAddress != "" {
		a, err := facts.PCIAddress(dev.pciAddress)
		if err != nil {
			return nil, fmt.Errorf("%s.disk.pciAddress: %w", field, err)
		}
		out.Address = &libvirtxml.DomainAddress{PCI: a}
	}
	if dev.readOnly {
		out.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	if d.BootOrder != nil {
		if *d.BootOrder == 0 {
			return nil, fmt.Errorf("%s.bootOrder: must be 1 or more", field)
		}
		out.Boot = &libvirtxml.DomainDeviceBoot{Order: *d.BootOrder}
	}
	if p := d.ErrorPolicy; p != nil {
		switch *p {
		case v1.DiskErrorPolicyStop, v1.DiskErrorPolicyIgnore, v1.DiskErrorPolicyReport, v1.DiskErrorPolicyEnospace:
			out.Driver.ErrorPolicy = string(*p)
		default:
			return nil, fmt.Errorf("%s.errorPolicy: %q is not one of stop, ignore, report, enospace", field, *p)
		}
	}
	var vf facts.Volume
	if vol != nil {
		vf = s.ctx.Volumes[vol.Name]
		if err := s.source(vmi, vol, volIndex, out, dev); err != nil {
			return nil, err
		}
	} else {
		// An empty CD-ROM drive: a block device with no medium.
		out.Source = nil
		out.Driver.Type = "raw"
	}
	if dev.kind == "lun" && (out.Source == nil || out.Source.Block == nil) {
		return nil, fmt.Errorf("%s.lun: needs a block volume (a PVC or DataVolume in block mode)", field)
	}
	if dev.reservation {
		out.Source.Reservations = &libvirtxml.DomainDiskReservations{
			Managed: "no",
			Source: &libvirtxml.DomainDiskReservationsSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{
				Mode: "client", Path: s.ctx.Layout.ShareDir + "/" + PRHelperSocket,
			}},
		}
	}
	if (dev.kind != "cdrom" || unmapVolume(vol)) && !vf.Preallocated {
		out.Driver.Discard = "unmap"
	}
	if d.Shareable != nil && *d.Shareable {
		out.Shareable = &libvirtxml.DomainDiskShareable{}
		if d.Cache == "" {
			d.Cache = v1.CacheNone
		}
		if d.Cache != v1.CacheNone {
			return nil, fmt.Errorf("%s.cache: a shareable disk needs cache none, not %q", field, d.Cache)
		}
	}
	if err := cacheAndIO(d, out, vf, vol != nil, field); err != nil {
		return nil, err
	}
	if d.BlockSize != nil {
		if err := blockIO(d.BlockSize, out, vf, field); err != nil {
			return nil, err
		}
	}
	if mq := vmi.Spec.Domain.Devices.BlockMultiQueue; mq != nil && *mq && dev.bus == v1.DiskBusVirtio {
		q := uint(facts.VCPUs(vmi))
		out.Driver.Queues = &q
	}
	return out, nil
}

// unmapVolume reports volume kinds whose source code adds discard=unmap
// whatever the device (KubeVirt's volume code does this for CD-ROMs too).
func unmapVolume(v *v1.Volume) bool {
	return v != nil && (v.ContainerDisk != nil || v.EmptyDisk != nil || v.PersistentVolumeClaim != nil || v.DataVolume != nil)
}

// cacheAndIO picks the cache mode (spec, else none, else writethrough when the
// file system refuses O_DIRECT) and the io mode (spec, else native for
// cache=none on a block device or a preallocated file).
func cacheAndIO(d v1.Disk, out *libvirtxml.DomainDisk, vf facts.Volume, hasSource bool, field string) error {
	switch d.Cache {
	case "":
		if !hasSource {
			break
		}
		out.Driver.Cache = string(v1.CacheNone)
		if vf.NoDirectIO {
			out.Driver.Cache = string(v1.CacheWriteThrough)
		}
	case v1.CacheNone:
		if vf.NoDirectIO {
			return fmt.Errorf("%s.cache: none needs O_DIRECT, which the volume's file system does not support", field)
		}
		out.Driver.Cache = string(d.Cache)
	case v1.CacheWriteThrough, v1.CacheWriteBack:
		out.Driver.Cache = string(d.Cache)
	default:
		return fmt.Errorf("%s.cache: %q is not one of none, writethrough, writeback", field, d.Cache)
	}
	switch d.IO {
	case "":
		if out.Driver.Cache == string(v1.CacheNone) && (vf.Block || vf.Preallocated) {
			out.Driver.IO = string(v1.IONative)
		}
	case v1.IONative, v1.IOThreads:
		if d.IO == v1.IONative && out.Driver.Cache != "" && out.Driver.Cache != string(v1.CacheNone) {
			return fmt.Errorf("%s.io: native needs cache none, not %q", field, out.Driver.Cache)
		}
		out.Driver.IO = string(d.IO)
	default:
		return fmt.Errorf("%s.io: %q is not native or threads", field, d.IO)
	}
	return nil
}

func blockIO(bs *v1.BlockSize, out *libvirtxml.DomainDisk, vf facts.Volume, field string) error {
	switch {
	case bs.Custom != nil && bs.MatchVolume != nil && (bs.MatchVolume.Enabled == nil || *bs.MatchVolume.Enabled):
		return fmt.Errorf("%s.blockSize: custom and matchVolume are mutually exclusive", field)
	case bs.Custom != nil:
		c := bs.Custom
		if c.Logical == 0 || c.Physical == 0 || c.Logical&(c.Logical-1) != 0 || c.Physical&(c.Physical-1) != 0 || c.Logical > c.Physical {
			return fmt.Errorf("%s.blockSize.custom: logical %d and physical %d must be powers of two with logical <= physical", field, c.Logical, c.Physical)
		}
		out.BlockIO = &libvirtxml.DomainDiskBlockIO{LogicalBlockSize: c.Logical, PhysicalBlockSize: c.Physical}
		if c.DiscardGranularity != nil {
			return fmt.Errorf("%s.blockSize.custom.discardGranularity: not supported by libvirt 9.0", field)
		}
	case bs.MatchVolume != nil && (bs.MatchVolume.Enabled == nil || *bs.MatchVolume.Enabled):
		if vf.LogicalBlockSize > 0 && vf.PhysicalBlockSize > 0 {
			out.BlockIO = &libvirtxml.DomainDiskBlockIO{LogicalBlockSize: vf.LogicalBlockSize, PhysicalBlockSize: vf.PhysicalBlockSize}
		}
	}
	return nil
}
