package compute

import (
	"fmt"
	"strconv"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Memory fills <memory>, <currentMemory> and, for memory hotplug,
// <maxMemory>. libvirt 9.0 needs a guest NUMA node whenever <maxMemory> is
// set, and memfd-backed memory wants one too, so this configurator also adds
// KubeVirt's synthetic single NUMA cell in those cases.
type Memory struct{ Ctx *facts.Context }

// MemfdAnnotation set to "false" keeps hugepages off memfd.
const MemfdAnnotation = "kubevirt.io/memfd"

// MaxMemorySlots is the slot count written on <maxMemory>. KubeVirt writes 0
// (it hotplugs virtio-mem, which takes no DIMM slot), but libvirt 9.0's schema
// requires the attribute and its qemu driver wants it non-zero, so we use 1.
const MaxMemorySlots = 1

func (m Memory) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	guest := guestMemoryBytes(vmi)
	if guest <= 0 {
		return fmt.Errorf("spec.domain.memory.guest: not set (nor resources.requests.memory)")
	}
	if guest < 1<<20 {
		return fmt.Errorf("spec.domain.memory.guest: %d bytes is less than 1 MiB", guest)
	}
	dom.Memory = &libvirtxml.DomainMemory{Value: uint(guest), Unit: "b"}
	dom.CurrentMemory = &libvirtxml.DomainCurrentMemory{Value: uint(guest), Unit: "b"}
	numa := useMemfd(vmi)
	if spec := vmi.Spec.Domain.Memory; spec != nil && spec.MaxGuest != nil {
		maxGuest := spec.MaxGuest.Value()
		switch {
		case maxGuest < guest:
			return fmt.Errorf("spec.domain.memory.maxGuest: %s is less than guest memory", spec.MaxGuest.String())
		case maxGuest > guest:
			dom.MaximumMemory = &libvirtxml.DomainMaxMemory{Value: uint(maxGuest), Unit: "b", Slots: MaxMemorySlots}
			numa = true
			if m.Ctx != nil && m.Ctx.VirtioMemAtDefine && arch(vmi, m.Ctx) != "s390x" {
				dev, err := VirtioMem(vmi, guest, 0)
				if err != nil {
					return err
				}
				dom.Devices.Memorydevs = append(dom.Devices.Memorydevs, *dev)
			}
		}
	}
	if numa && arch(vmi, m.Ctx) != "s390x" && dom.CPU != nil && dom.VCPU != nil {
		dom.CPU.Numa = &libvirtxml.DomainNuma{Cell: []libvirtxml.DomainCell{{
			ID:     uintPtr(0),
			CPUs:   "0-" + strconv.FormatUint(uint64(dom.VCPU.Value-1), 10),
			Memory: uint(guest >> 10),
			Unit:   "KiB",
		}}}
	}
	return nil
}

// virtio-mem block sizes KubeVirt uses (liveupdate/memory
// HotplugBlockAlignmentBytes), 1 GiB with 1Gi hugepages.
const (
	virtioMemBlock         = 2 << 20
	virtioMemBlockHugepage = 1 << 30
)

// VirtioMem is KubeVirt's virtio-mem device for memory hotplug
// (liveupdate/memory BuildMemoryDevice): the memory from boot bytes (what
// the guest booted with) up to maxGuest, on NUMA node 0, requested bytes
// of it plugged. Figures that are not whole blocks above the boot size, or
// beyond maxGuest, are refused naming them.
func VirtioMem(vmi *v1.VirtualMachineInstance, boot, requested int64) (*libvirtxml.DomainMemorydev, error) {
	mem := vmi.Spec.Domain.Memory
	if mem == nil || mem.MaxGuest == nil {
		return nil, fmt.Errorf("spec.domain.memory.maxGuest is not set: the VM was not started for memory hotplug")
	}
	maxGuest := mem.MaxGuest.Value()
	block := int64(virtioMemBlock)
	if mem.Hugepages != nil && mem.Hugepages.PageSize == "1Gi" {
		block = virtioMemBlockHugepage
	}
	switch {
	case boot+requested > maxGuest:
		return nil, fmt.Errorf("guest %s is more than maxGuest %s", resource.NewQuantity(boot+requested, resource.BinarySI), mem.MaxGuest.String())
	case requested < 0:
		return nil, fmt.Errorf("guest %s is less than the %s the VM booted with (memory cannot go below it)",
			resource.NewQuantity(boot+requested, resource.BinarySI), resource.NewQuantity(boot, resource.BinarySI))
	case requested%block != 0 || (maxGuest-boot)%block != 0:
		return nil, fmt.Errorf("guest %s and maxGuest %s must exceed the boot size %s by multiples of %d MiB",
			resource.NewQuantity(boot+requested, resource.BinarySI), mem.MaxGuest.String(), resource.NewQuantity(boot, resource.BinarySI), block>>20)
	}
	return &libvirtxml.DomainMemorydev{Model: "virtio-mem", Target: &libvirtxml.DomainMemorydevTarget{
		Size:      &libvirtxml.DomainMemorydevTargetSize{Value: uint((maxGuest - boot) >> 10), Unit: "KiB"},
		Node:      &libvirtxml.DomainMemorydevTargetNode{Value: 0},
		Block:     &libvirtxml.DomainMemorydevTargetBlock{Value: uint(block >> 10), Unit: "KiB"},
		Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: uint(requested >> 10), Unit: "KiB"},
	}}, nil
}

// guestMemoryBytes is the guest memory: memory.guest, else the memory
// request, else the limit, else the hugepage size (KubeVirt's default order).
func guestMemoryBytes(vmi *v1.VirtualMachineInstance) int64 {
	spec := vmi.Spec.Domain.Memory
	if spec != nil && spec.Guest != nil {
		return spec.Guest.Value()
	}
	res := vmi.Spec.Domain.Resources
	if q, ok := res.Requests[k8sv1.ResourceMemory]; ok {
		return q.Value()
	}
	if q, ok := res.Limits[k8sv1.ResourceMemory]; ok {
		return q.Value()
	}
	if spec != nil && spec.Hugepages != nil {
		if q, err := resource.ParseQuantity(spec.Hugepages.PageSize); err == nil {
			return q.Value()
		}
	}
	return 0
}

// useMemfd: memory shared with a vhost-user backend is backed by memfd,
// and so are hugepages unless the annotation says not to.
func useMemfd(vmi *v1.VirtualMachineInstance) bool {
	m := vmi.Spec.Domain.Memory
	return sharedMemory(vmi) || m != nil && m.Hugepages != nil && vmi.Annotations[MemfdAnnotation] != "false"
}

// sharedMemory: a vhost-user backend outside QEMU (each virtiofs
// filesystem's virtiofsd) maps the guest's memory, so the memory must be
// shared.
func sharedMemory(vmi *v1.VirtualMachineInstance) bool {
	for _, fs := range vmi.Spec.Domain.Devices.Filesystems {
		if fs.Virtiofs != nil {
			return true
		}
	}
	return false
}

// MemoryBacking adds hugepages (with the spec's page size), shared access
// for vhost-user backends and memfd backing, refusing a guest the host's
// free hugepages of that size cannot hold (QEMU would fail later, saying
// less).
type MemoryBacking struct{ Ctx *facts.Context }

func (mb MemoryBacking) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	backing := &libvirtxml.DomainMemoryBacking{}
	if err := mb.hugepages(vmi, backing); err != nil {
		return err
	}
	if sharedMemory(vmi) {
		backing.MemoryAccess = &libvirtxml.DomainMemoryAccess{Mode: "shared"}
	}
	if useMemfd(vmi) {
		backing.MemorySource = &libvirtxml.DomainMemorySource{Type: "memfd"}
	}
	if *backing != (libvirtxml.DomainMemoryBacking{}) {
		dom.MemoryBacking = backing
	}
	return nil
}

// hugepages puts the spec's hugepages, if any, on backing.
func (mb MemoryBacking) hugepages(vmi *v1.VirtualMachineInstance, backing *libvirtxml.DomainMemoryBacking) error {
	m := vmi.Spec.Domain.Memory
	if m == nil || m.Hugepages == nil {
		return nil
	}
	q, err := resource.ParseQuantity(m.Hugepages.PageSize)
	if err != nil || q.Value() < 4096 {
		return fmt.Errorf("spec.domain.memory.hugepages.pageSize: %q is not a page size such as 2Mi or 1Gi", m.Hugepages.PageSize)
	}
	if free, known := freeHugepages(mb.Ctx, uint64(q.Value())); known {
		need := (uint64(guestMemoryBytes(vmi)) + uint64(q.Value()) - 1) / uint64(q.Value())
		if free < need {
			return fmt.Errorf("spec.domain.memory.hugepages.pageSize: the guest's %s needs %d free %s hugepages, the host has %d (reserve them: vm.nr_hugepages, or /sys/kernel/mm/hugepages)",
				resource.NewQuantity(guestMemoryBytes(vmi), resource.BinarySI), need, m.Hugepages.PageSize, free)
		}
	}
	backing.MemoryHugePages = &libvirtxml.DomainMemoryHugepages{Hugepages: []libvirtxml.DomainMemoryHugepage{{
		Size: uint(q.Value() >> 10), Unit: "KiB",
	}}}
	return nil
}

// freeHugepages is the host's free hugepages of size bytes, when known.
func freeHugepages(c *facts.Context, size uint64) (uint64, bool) {
	if c == nil || c.FreeHugepages == nil {
		return 0, false
	}
	return c.FreeHugepages[size], true
}
