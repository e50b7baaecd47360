package domain

import (
	"context"
	"syscall"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// growOffline grows, before the domain is defined, the image files of the
// disks on PVCs that grew while the VM was off (KubeVirt's
// expandDiskImagesOffline), so that the guest boots with the size its
// volume has: the size growSize gives from the file's size and the space
// its file system has. Block devices are left to the running guest, as
// KubeVirt leaves them. A disk that cannot be grown is logged and left as
// it is, as KubeVirt leaves it: the guest sees its old size, and the
// online growth tries again once it runs.
func (m *Manager) growOffline(ctx context.Context, v *v1.VirtualMachineInstance, dom *libvirtxml.Domain, vols map[string]facts.Volume) {
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
			m.log.Error("disk not grown before the start", "disk", c.name, "reason", err.Error())
			continue
		}
		if size == 0 {
			continue
		}
		if err := m.cfg.Disks.GrowRaw(ctx, c.path, int64(size), vols[c.name].Preallocated); err != nil {
			m.log.Error("disk not grown before the start", "disk", c.name, "reason", err.Error())
			continue
		}
		m.log.Info("disk grown before the start", "disk", c.name, "from", from, "to", size)
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
