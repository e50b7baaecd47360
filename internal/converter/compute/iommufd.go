package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// IOMMUFD stands where KubeVirt v1.9's launcher writes <iommufd
// enabled="yes" fdgroup="iommu"/> and associates the descriptor its IOMMUFD
// device plugin handed over (the IOMMUFD feature gate puts the plugin's
// socket in every launcher pod). libvirt 9.0 has neither that element nor
// iommufd host devices (KubeVirt asks for libvirt 12.2), so a pod given the
// socket is refused rather than run without what the cluster asked for.
type IOMMUFD struct{ Ctx *facts.Context }

func (i IOMMUFD) Configure(_ *v1.VirtualMachineInstance, _ *libvirtxml.Domain) error {
	if i.Ctx.Devices.IOMMUFD {
		return fmt.Errorf("the pod has the IOMMUFD device plugin's socket %s (KubeVirt's IOMMUFD feature gate): not supported: libvirt 9.0 has no <iommufd> domain element (KubeVirt needs libvirt 12.2 or later for it)", layout.IOMMUFDSocket)
	}
	return nil
}
