package storage

import (
	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// ioThreads implements KubeVirt's I/O thread allocation (B.6): a pool of
// shared threads handed round-robin to virtio disks, plus one thread per
// disk with dedicatedIOThread.
type ioThreads struct {
	on            bool
	auto          uint
	dedicated     uint
	nextShared    uint
	nextDedicated uint
}

func newIOThreads(vmi *v1.VirtualMachineInstance) *ioThreads {
	t := &ioThreads{}
	policy := vmi.Spec.Domain.IOThreadsPolicy
	var dedicated, total uint
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		total++
		if d.DedicatedIOThread != nil && *d.DedicatedIOThread {
			dedicated++
		}
	}
	if policy == nil && dedicated == 0 {
		return t
	}
	t.on = true
	limit := uint(1)
	if policy != nil && *policy == v1.IOThreadsPolicyAuto {
		cpus := int64(1)
		res := vmi.Spec.Domain.Resources
		if q, ok := res.Requests[k8sv1.ResourceCPU]; ok && q.Value() > 0 {
			cpus = q.Value()
		} else if q, ok := res.Limits[k8sv1.ResourceCPU]; ok && q.Value() > 0 {
			cpus = q.Value()
		}
		limit = uint(min(2*cpus, 1<<16))
		if cpu := vmi.Spec.Domain.CPU; cpu != nil && cpu.DedicatedCPUPlacement && cpu.IsolateEmulatorThread {
			limit = 1
		}
	}
	auto := total - dedicated
	if auto+dedicated > limit {
		auto = 1
		if limit > dedicated+1 {
			auto = limit - dedicated
		}
	}
	t.auto, t.dedicated = auto, dedicated
	return t
}

// count is the <iothreads> value, 0 when I/O threads are off.
func (t *ioThreads) count() uint {
	if !t.on {
		return 0
	}
	return t.auto + t.dedicated
}

// assign gives a virtio disk its iothread id.
func (t *ioThreads) assign(d *v1.Disk, out *libvirtxml.DomainDisk) {
	if !t.on || out.Target == nil || out.Target.Bus != string(v1.DiskBusVirtio) {
		return
	}
	var id uint
	if d.DedicatedIOThread != nil && *d.DedicatedIOThread {
		t.nextDedicated++
		id = t.auto + t.nextDedicated
	} else {
		id = t.nextShared%max(t.auto, 1) + 1
		t.nextShared++
	}
	out.Driver.IOThread = &id
}
