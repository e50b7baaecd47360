package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Balloon adds the memory balloon: always present, model "none" when
// autoattachMemBalloon is false, otherwise virtio with the stats period and
// free page reporting from the Context.
type Balloon struct{ Ctx *facts.Context }

// FreePageReportingDisabledAnnotation turns free page reporting off for one VMI.
const FreePageReportingDisabledAnnotation = "kubevirt.io/free-page-reporting-disabled"

func (b Balloon) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if !notFalse(vmi.Spec.Domain.Devices.AutoattachMemBalloon) {
		devices(dom).MemBalloon = &libvirtxml.DomainMemBalloon{Model: "none"}
		return nil
	}
	mb := &libvirtxml.DomainMemBalloon{
		Model:             virtioModel(vmi, b.Ctx),
		FreePageReporting: "on",
	}
	if b.Ctx.MemBalloonStatsPeriod > 0 {
		mb.Stats = &libvirtxml.DomainMemBalloonStats{Period: uint(b.Ctx.MemBalloonStatsPeriod)}
	}
	if b.Ctx.FreePageReportingDisabled || highPerformance(vmi) ||
		vmi.Annotations[FreePageReportingDisabledAnnotation] == "true" {
		mb.FreePageReporting = "off"
	}
	devices(dom).MemBalloon = mb
	return nil
}

// highPerformance is KubeVirt's test for VMIs whose memory must not be
// handed back to the host: dedicated CPUs, realtime or hugepages.
func highPerformance(vmi *v1.VirtualMachineInstance) bool {
	if cpu := vmi.Spec.Domain.CPU; cpu != nil && (cpu.DedicatedCPUPlacement || cpu.Realtime != nil) {
		return true
	}
	m := vmi.Spec.Domain.Memory
	return m != nil && m.Hugepages != nil
}
