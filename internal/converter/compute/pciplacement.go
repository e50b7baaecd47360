package compute

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// PCIPlacement stands where KubeVirt v1.9 places the PCI host devices of a
// VMI with dedicated CPUs by the host's NUMA nodes (a pcie-expander-bus with
// root ports per node, under the PCINUMAAwareTopology gate) or sets them up
// for NVIDIA Grace I/O virtualization. This launcher does neither, so a
// VMI that one of them would change is refused, naming what asked for it,
// instead of running with a placement the cluster did not choose.
type PCIPlacement struct{ Ctx *facts.Context }

func (p PCIPlacement) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if a := p.Ctx.PCIPlacement.GraceAliases; len(a) > 0 {
		// KubeVirt refuses it too without an IOMMUFD descriptor, which
		// this launcher never has (compute.IOMMUFD).
		return fmt.Errorf("options.graceHostDeviceAliases (%s): Grace I/O virtualization is not supported: it needs IOMMUFD, which libvirt 9.0 lacks", strings.Join(a, ", "))
	}
	if !p.Ctx.PCIPlacement.NUMAAware || !vmi.IsCPUDedicated() || arch(vmi, p.Ctx) != "amd64" {
		return nil
	}
	var placed []string
	for _, h := range dom.Devices.Hostdevs {
		s := h.SubsysPCI
		if s == nil || s.Source == nil || s.Source.Address == nil || h.Address != nil {
			continue // KubeVirt's placement skips these too
		}
		alias := ""
		if h.Alias != nil {
			alias = h.Alias.Name
		}
		placed = append(placed, alias)
	}
	if len(placed) == 0 {
		return nil
	}
	return fmt.Errorf("clusterConfig.PCINUMAAwareTopologyEnabled: NUMA-aware placement of the PCI host devices (%s) of a VMI with dedicatedCpuPlacement is not supported by this launcher", strings.Join(placed, ", "))
}
