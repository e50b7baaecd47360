package compute_test

import (
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func TestMemory(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "guest", Contains: []string{`<memory unit="b">1073741824</memory>`, `<currentMemory unit="b">1073741824</currentMemory>`}, Absent: []string{"maxMemory", "<numa>", "memoryBacking"}},
		{Name: "decimal guest", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = q("1024M") },
			Contains: []string{`<memory unit="b">1024000000</memory>`}},
		{Name: "from requests", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = nil
			v.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("512Mi")}
		}, Contains: []string{`<memory unit="b">536870912</memory>`}},
		{Name: "hotplug maximum adds slots and a NUMA cell", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.MaxGuest = q("4Gi") },
			Contains: []string{`<maxMemory unit="b" slots="1">4294967296</maxMemory>`, `<memory unit="b">1073741824</memory>`, `<cell id="0" cpus="0-0" memory="1048576" unit="KiB">`}},
		{Name: "hotplug maximum: no virtio-mem device at define (KubeVirt attaches it at the first hotplug)", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.MaxGuest = q("4Gi") },
			Absent: []string{"virtio-mem"}},
		{Name: "hotplug maximum on a QEMU that cannot hotplug virtio-mem: an empty device at define",
			VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.MaxGuest = q("4Gi") }, Ctx: func(c *facts.Context) { c.VirtioMemAtDefine = true },
			Contains: []string{`<memory model="virtio-mem">`, `<size unit="KiB">3145728</size>`, `<node>0</node>`, `<block unit="KiB">2048</block>`, `<requested unit="KiB">0</requested>`}},
		{Name: "virtio-mem at define with 1Gi hugepages takes 1 GiB blocks",
			VMI: func(v *v1.VirtualMachineInstance) {
				v.Spec.Domain.Memory.MaxGuest = q("4Gi")
				v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "1Gi"}
			}, Ctx: func(c *facts.Context) { c.VirtioMemAtDefine = true },
			Contains: []string{`<block unit="KiB">1048576</block>`}},
		{Name: "virtio-mem at define, maxGuest not whole blocks above guest",
			VMI: func(v *v1.VirtualMachineInstance) {
				v.Spec.Domain.Memory.MaxGuest = q("1025Mi")
				v.Spec.Domain.Memory.Guest = q("1Gi")
			},
			Ctx: func(c *facts.Context) { c.VirtioMemAtDefine = true }, Err: "must exceed the boot size 1Gi by multiples of 2 MiB"},
		{Name: "no virtio-mem without a hotplug maximum", Ctx: func(c *facts.Context) { c.VirtioMemAtDefine = true }, Absent: []string{"virtio-mem"}},
		{Name: "maxGuest equal to guest is no hotplug", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.MaxGuest = q("1Gi") },
			Absent: []string{"maxMemory"}},
		{Name: "maxGuest below guest", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.MaxGuest = q("512Mi") },
			Err: "spec.domain.memory.maxGuest: 512Mi is less than guest memory"},
		{Name: "no memory", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory = nil }, Err: "spec.domain.memory.guest: not set"},
		{Name: "tiny memory", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = q("1k") }, Err: "less than 1 MiB"},
		{Name: "hugepages with memfd and NUMA", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
			v.Spec.Domain.CPU.Sockets = 2
		}, Contains: []string{`<hugepages>`, `<page size="2048" unit="KiB">`, `<source type="memfd">`, `<cell id="0" cpus="0-1" memory="1048576" unit="KiB">`, `freePageReporting="off"`}},
		{Name: "hugepages without memfd", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "1Gi"}
			v.Annotations = map[string]string{"kubevirt.io/memfd": "false"}
		}, Contains: []string{`<page size="1048576" unit="KiB">`}, Absent: []string{"memfd", "<numa>"}},
		{Name: "virtiofs: shared memory on memfd, with KubeVirt's synthetic NUMA cell", VMI: withVirtiofs,
			Contains: []string{"<memoryBacking>", `<source type="memfd">`, `<access mode="shared">`, `<cell id="0" cpus="0-0" memory="1048576" unit="KiB">`},
			Absent:   []string{"<hugepages>"}},
		{Name: "virtiofs with hugepages: both, memfd even against the annotation", VMI: func(v *v1.VirtualMachineInstance) {
			withVirtiofs(v)
			v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
			v.Annotations = map[string]string{"kubevirt.io/memfd": "false"}
		}, Contains: []string{`<page size="2048" unit="KiB">`, `<source type="memfd">`, `<access mode="shared">`, "<numa>"}},
		{Name: "bad page size", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "huge"} },
			Err: "spec.domain.memory.hugepages.pageSize"},
		{Name: "enough free hugepages", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"} },
			Ctx:      func(c *facts.Context) { c.FreeHugepages = map[uint64]uint64{2 << 20: 512, 1 << 30: 0} },
			Contains: []string{`<page size="2048" unit="KiB">`}},
		{Name: "too few free hugepages", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"} },
			Ctx: func(c *facts.Context) { c.FreeHugepages = map[uint64]uint64{2 << 20: 511} },
			Err: "spec.domain.memory.hugepages.pageSize: the guest's 1Gi needs 512 free 2Mi hugepages, the host has 511"},
		{Name: "no hugepages of that size", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "1Gi"} },
			Ctx: func(c *facts.Context) { c.FreeHugepages = map[uint64]uint64{2 << 20: 4096} },
			Err: "needs 1 free 1Gi hugepages, the host has 0"},
	})
}

func withVirtiofs(v *v1.VirtualMachineInstance) {
	v.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "fs", Virtiofs: &v1.FilesystemVirtiofs{}}}
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "fs", VolumeSource: v1.VolumeSource{
		ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: k8sv1.LocalObjectReference{Name: "app-config"}},
	}})
}
