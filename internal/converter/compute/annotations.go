package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// Annotations refuses the VMI annotations KubeVirt's launcher acts on that
// this launcher does not, so that a VMI carrying one fails by name instead
// of running differently. The ones it does honour are read where they act
// (docs/kubevirt-conversion.md, B.11).
type Annotations struct{}

// refusedAnnotations are KubeVirt's functional-test switches: each makes
// its launcher fail on purpose (a migration, a target's preparation, a
// memory hotplug).
var refusedAnnotations = []string{
	v1.FuncTestForceLauncherMigrationFailureAnnotation,
	v1.FuncTestBlockLauncherPrepareMigrationTargetAnnotation,
	v1.FuncTestMemoryHotplugFailAnnotation,
}

func (Annotations) Configure(vmi *v1.VirtualMachineInstance, _ *libvirtxml.Domain) error {
	for _, name := range refusedAnnotations {
		if _, ok := vmi.Annotations[name]; ok {
			return fmt.Errorf("metadata.annotations[%s]: not supported (a KubeVirt functional-test switch)", name)
		}
	}
	return nil
}
