package compute_test

import (
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestCPU(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "host-model", Contains: []string{`<cpu mode="host-model">`, `<vcpu placement="static">1</vcpu>`, `<topology sockets="1" cores="1" threads="1">`}},
		{Name: "host-passthrough", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Model = v1.CPUModeHostPassthrough },
			Contains: []string{`<cpu mode="host-passthrough">`}},
		{Name: "named model gets mpx disabled", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Model = "Skylake-Client"
			v.Spec.Domain.CPU.Features = []v1.CPUFeature{{Name: "vmx", Policy: "require"}, {Name: "pcid"}}
		}, Contains: []string{`<cpu mode="custom">`, `<model>Skylake-Client</model>`, `<feature policy="require" name="vmx">`, `<feature policy="require" name="pcid">`, `<feature policy="disable" name="mpx">`}},
		{Name: "listed mpx kept", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Model = "Haswell"
			v.Spec.Domain.CPU.Features = []v1.CPUFeature{{Name: "mpx", Policy: "require"}}
		}, Contains: []string{`<feature policy="require" name="mpx">`}, Absent: []string{`"disable" name="mpx"`}},
		{Name: "emulation replaces host-model, keeps topology", Emulation: true, VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.Cores, v.Spec.Domain.CPU.Threads = 2, 2, 1
		}, Contains: []string{`<domain type="qemu">`, `<cpu mode="maximum">`, `<topology sockets="2" cores="2" threads="1">`, `<vcpu placement="static">4</vcpu>`},
			Absent: []string{"host-model", "host-passthrough", "mpx"}},
		{Name: "emulation replaces host-passthrough", Emulation: true, VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Model = v1.CPUModeHostPassthrough },
			Contains: []string{`<cpu mode="maximum">`}, Absent: []string{"host-passthrough"}},
		{Name: "emulation keeps a named model", Emulation: true, VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Model = "Nehalem" },
			Contains: []string{`<model>Nehalem</model>`}},
		{Name: "zero topology reads as one", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Cores = 0
			v.Spec.Domain.CPU.Threads = 0
			v.Spec.Domain.CPU.Sockets = 3
		},
			Contains: []string{`<topology sockets="3" cores="1" threads="1">`, `>3</vcpu>`}},
		{Name: "all zero takes limits.cpu rounded up", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = nil
			v.Spec.Domain.Resources.Limits = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("1500m")}
		}, Contains: []string{`<topology sockets="2" cores="1" threads="1">`, `<cpu mode="host-model">`}},
		{Name: "hotplug layout", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.Cores, v.Spec.Domain.CPU.MaxSockets = 1, 2, 3
		}, Contains: []string{`<topology sockets="3" cores="2" threads="1">`, `<vcpu placement="static">6</vcpu>`},
			Check: func(t *testing.T, d *libvirtxml.Domain) {
				want := []struct{ en, hp string }{{"yes", "no"}, {"yes", "no"}, {"no", "yes"}, {"no", "yes"}, {"no", "yes"}, {"no", "yes"}}
				if d.VCPUs == nil || len(d.VCPUs.VCPU) != len(want) {
					t.Fatalf("vcpus = %+v", d.VCPUs)
				}
				for i, w := range want {
					got := d.VCPUs.VCPU[i]
					if *got.Id != uint(i) || got.Enabled != w.en || got.Hotpluggable != w.hp {
						t.Errorf("vcpu %d = id %d enabled %s hotpluggable %s, want %s %s", i, *got.Id, got.Enabled, got.Hotpluggable, w.en, w.hp)
					}
				}
			}},
		{Name: "no hotplug on arm64", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Architecture = "arm64"
			v.Spec.Domain.Machine.Type = "virt"
			v.Spec.Domain.CPU.MaxSockets = 4
			v.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusVirtio
		}, Absent: []string{"<vcpus>"}, Contains: []string{`<topology sockets="1"`}},
		{Name: "maxSockets below sockets", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.MaxSockets = 4, 2 },
			Err: "spec.domain.cpu.maxSockets: 2 is less than sockets 4"},
		{Name: "too many vcpus", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.Cores = 64, 16 },
			Err: "1024 vCPUs"},
		{Name: "bad feature policy", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Features = []v1.CPUFeature{{Name: "vmx", Policy: "always"}}
		}, Err: "spec.domain.cpu.features[0].policy"},
		{Name: "dedicated cpus pinned", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Sockets = 2
			v.Spec.Domain.CPU.DedicatedCPUPlacement = true
			v.Spec.Domain.CPU.IsolateEmulatorThread = true
		}, Ctx: func(c *facts.Context) { c.CPUSet = []uint{4, 5, 6} },
			Contains: []string{`<vcpupin vcpu="0" cpuset="4">`, `<vcpupin vcpu="1" cpuset="5">`, `<emulatorpin cpuset="6">`, `<hint-dedicated state="on">`}},
		{Name: "dedicated cpus without a cpuset", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.DedicatedCPUPlacement = true },
			Err: "spec.domain.cpu.dedicatedCpuPlacement: 1 vCPUs do not fit the pod's CPU set (empty, 0 CPUs"},
	})
}
