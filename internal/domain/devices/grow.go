package devices

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"syscall"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// GrowOffline grows, before the domain is defined, the image files of the
// disks on PVCs that grew while the VM was off (KubeVirt's
// expandDiskImagesOffline), so that the guest boots with the size its
// volume has: the size growSize gives from the file's size and the space
// its file system has. Block devices are left to the running guest, as
// KubeVirt leaves them. A disk that cannot be grown is logged and left as
// it is, as KubeVirt leaves it: the guest sees its old size, and the
// online growth tries again once it runs.
//
// grow grows the raw image file of disk name at path to size bytes.
func GrowOffline(log *slog.Logger, v *v1.VirtualMachineInstance, dom *libvirtxml.Domain, grow func(name, path string, size int64) error) {
	if dom.Devices == nil {
		return
	}
	for _, c := range growCandidates(v, dom.Devices.Disks, nil) {
		if c.block {
			continue
		}
		if d, ok := findDisk(dom.Devices.Disks, c.name); !ok || d.Driver == nil || d.Driver.Type != "raw" {
			continue // a PVC's image is raw; anything else is not probed
		}
		size, from, err := offlineGrowSize(c)
		if err != nil {
			log.Error("disk not grown before the start", "disk", c.name, "reason", err.Error())
			continue
		}
		if size == 0 {
			continue
		}
		if err := grow(c.name, c.path, int64(size)); err != nil {
			log.Error("disk not grown before the start", "disk", c.name, "reason", err.Error())
			continue
		}
		log.Info("disk grown before the start", "disk", c.name, "from", from, "to", size)
	}
}

// offlineGrowSize is the size c's image file must grow to (0: none) and
// its size now.
func offlineGrowSize(c growCandidate) (size, now uint64, err error) {
	var st syscall.Stat_t
	if err := syscall.Stat(c.path, &st); err != nil {
		return 0, 0, err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(c.path, &fs); err != nil {
		return 0, 0, err
	}
	now = uint64(st.Size)
	usable := st.Blocks*512 + int64(fs.Bavail)*fs.Bsize
	size, err = c.growSize(now, now, usable)
	return size, now, err
}

// growCandidate is a live disk on a PVC or DataVolume (the raw file or
// block device itself, not an overlay over it) whose size may have to grow
// with its volume, as KubeVirt's launcher grows it on every Sync.
type growCandidate struct {
	name   string // the disk's VMI name
	target string // its target (libvirt's name for it)
	path   string // its source
	block  bool
	// pvcSize is the smaller of the PVC's request and capacity (KubeVirt's
	// GetDiskCapacity), 0 when the status does not say; overhead the
	// share of a file system volume its file system keeps, nil when not
	// known (KubeVirt then leaves a file alone).
	pvcSize  int64
	overhead *float64
}

// growCandidates lists the live disks that growSize must look at: disks or
// LUNs whose volume status carries the PVC's figures, on their raw source.
func growCandidates(v *v1.VirtualMachineInstance, live []libvirtxml.DomainDisk, detaching []libvirtxml.DomainDisk) []growCandidate {
	status := map[string]*v1.PersistentVolumeClaimInfo{}
	for _, st := range v.Status.VolumeStatus {
		if st.PersistentVolumeClaimInfo != nil {
			status[st.Name] = st.PersistentVolumeClaimInfo
		}
	}
	gone := byAlias(detaching, diskAlias)
	var out []growCandidate
	for _, d := range live {
		name, ok := userAlias(d.Alias)
		info := status[name]
		// libvirt writes an empty <backingStore/> for a disk with none.
		overlay := d.BackingStore != nil && pathOf(d.BackingStore.Source) != ""
		if _, leaving := gone[name]; !ok || leaving || info == nil || d.Device == "cdrom" || overlay ||
			diskSourcePath(&d) == "" || d.Target == nil || d.Target.Dev == "" {
			continue
		}
		c := growCandidate{name: name, target: d.Target.Dev, path: diskSourcePath(&d), block: d.Source.Block != nil}
		capacity, okC := info.Capacity[k8sv1.ResourceStorage]
		request, okR := info.Requests[k8sv1.ResourceStorage]
		if okC && okR {
			c.pvcSize = min(capacity.Value(), request.Value())
		}
		if info.FilesystemOverhead != nil {
			if f, err := strconv.ParseFloat(string(*info.FilesystemOverhead), 64); err == nil && f >= 0 && f <= 1 {
				c.overhead = &f
			}
		}
		out = append(out, c)
	}
	return out
}

// growSize decides the size disk c must grow to (0: none), from what
// libvirt reports of it (capacity: the size the guest sees; physical: its
// source's size) and, for a file, the bytes its file could use (usable:
// its allocation plus the file system's free space). As KubeVirt: a block
// device is grown to the device's size; a file to the PVC's size less the
// file system overhead, bounded by what is usable, rounded down to 1 MiB,
// and only ever grown. A disk never shrinks: a block device smaller than
// the guest's disk is an error.
func (c growCandidate) growSize(capacity, physical uint64, usable int64) (uint64, error) {
	if capacity == 0 {
		return 0, nil // libvirt does not know the size: leave it
	}
	if c.block {
		if physical < capacity {
			return 0, fmt.Errorf("disk %q: its block device shrank to %d bytes, below the %d the guest has; a disk cannot shrink", c.name, physical, capacity)
		}
		if physical > capacity {
			return physical, nil
		}
		return 0, nil
	}
	if c.pvcSize <= 0 || c.overhead == nil {
		return 0, nil
	}
	size := int64((1 - *c.overhead) * float64(min(c.pvcSize, usable)))
	size -= size % (1 << 20)
	if size <= 0 || uint64(size) <= capacity {
		return 0, nil
	}
	return uint64(size), nil
}

// growDisk grows a disk on a PVC when its volume has grown (growSize), in
// the running guest too (virDomainBlockResize), and confirms the new size.
// It reports whether it changed the disk.
func (a *Applier) growDisk(ctx context.Context, c growCandidate) (bool, error) {
	alloc, capacity, physical, err := a.Client.BlockInfo(ctx, c.target)
	if err != nil {
		return false, fmt.Errorf("sync: disk %q: %w", c.name, err)
	}
	var usable int64
	if !c.block {
		var st syscall.Statfs_t
		// The file's own file system: a PVC's disk.img is bind-mounted
		// into a directory of another one (hotplug-disks, an emptyDir).
		if err := syscall.Statfs(c.path, &st); err != nil {
			return false, fmt.Errorf("sync: disk %q: free space of the file system of %s: %w", c.name, c.path, err)
		}
		usable = int64(alloc) + int64(st.Bavail)*st.Bsize
	}
	size, err := c.growSize(capacity, physical, usable)
	if err != nil || size == 0 {
		if err != nil {
			err = fmt.Errorf("sync: %w", err)
		}
		return false, err
	}
	a.Log.Info("growing disk", "disk", c.name, "from", capacity, "to", size)
	if err := a.Client.BlockResize(ctx, c.target, size); err != nil {
		return false, fmt.Errorf("sync: disk %q: grow from %d to %d bytes: %w", c.name, capacity, size, err)
	}
	if _, capacity, _, err = a.Client.BlockInfo(ctx, c.target); err != nil {
		return true, fmt.Errorf("sync: disk %q: %w", c.name, err)
	}
	if capacity != size {
		return true, fmt.Errorf("sync: disk %q: grown to %d bytes, libvirt reports %d", c.name, size, capacity)
	}
	return true, nil
}
