// Package converter turns a defaulted VirtualMachineInstance into a libvirt
// domain. It is a pure function of its inputs: every fact about the world
// comes in through a Context, so it can be tested with tables and fuzzed.
//
// The work is split into small configurators, one per concern, that run in a
// fixed order (KubeVirt's order, so that a later configurator overriding an
// earlier one behaves the same way).
//
// KubeVirt's rules and the order of the steps: docs/kubevirt-conversion.md
// B.1. Where the result differs from KubeVirt's converter, on purpose:
//   - <metadata> carries the VMI's UID and grace period (KubeVirt leaves the
//     uid empty), so a restarted launcher can find them in the domain.
//   - SMBIOS entries with an empty value are left out, block disk sources
//     carry no name attribute, CPU features without a policy get
//     policy="require": KubeVirt's XML fails libvirt's schema in these places.
//   - <maxMemory> has slots="1" (libvirt 9.0 requires the attribute and a
//     guest NUMA node for memory hotplug; KubeVirt writes 0), and the single
//     synthetic NUMA cell is added whenever maxMemory is set.
//   - Under emulation, host-model/host-passthrough become <cpu
//     mode="maximum"> (QEMU's -cpu max; libvirt 9.0 knows no custom model
//     "max"), keeping the topology; vhost-net is not forced.
//   - Hugepages name their page size; <currentMemory> is always written.
//   - The spare pcie-root-ports for hotplug are appended directly (P + E of
//     KubeVirt's rule) instead of defining with placeholder NICs first.
//   - What libvirt 9.0 lacks is refused with a "not supported" error
//     (Hyper-V tlbflush direct/extended, discard_granularity, MSDM table),
//     as are slirp, macvtap, launch security, the supplementalPool I/O
//     thread policy and IOMMUFD (a pod given the IOMMUFD device plugin's
//     socket).
//   - Root-complex placement skips the slots the spec gave devices.
//   - Not converted: the SeaBIOS debug log (a developer's switch, launcher
//     verbosity above 5); KubeVirt's functional-test annotations are
//     refused.
package converter

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/converter/network"
	"github.com/virtlauncher/virtlauncher/internal/converter/storage"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Configurators returns the ordered list of steps for one conversion.
func Configurators(c *facts.Context) []facts.Configurator {
	return []facts.Configurator{
		compute.Metadata{},
		compute.Annotations{},
		network.New(c),
		compute.TPM{},
		compute.VSOCK{Ctx: c},
		compute.Channels{Ctx: c},
		compute.Clock{},
		compute.RNG{Ctx: c},
		compute.Input{Ctx: c},
		compute.Balloon{Ctx: c},
		compute.Graphics{Ctx: c},
		compute.Sound{},
		hostdev.New(c),
		compute.Watchdog{Ctx: c},
		compute.Console{Ctx: c},
		compute.Panic{},
		compute.Features{Ctx: c},
		compute.SysInfo{Ctx: c},
		compute.OS{Ctx: c},
		storage.NewVirtiofs(c),
		storage.New(c),
		compute.USBRedir{Ctx: c},
		compute.Controllers{Ctx: c},
		compute.Ignition{Ctx: c},
		compute.CPU{Ctx: c},
		compute.Memory{Ctx: c},
		compute.MemoryBacking{Ctx: c},
		compute.RebootPolicy{},
		compute.IOMMUFD{Ctx: c},
		compute.Hypervisor{Ctx: c},
		// Last, as KubeVirt adjusts the finished domain for dedicated CPUs.
		compute.CPUPinning{Ctx: c},
		compute.PCIPlacement{Ctx: c},
	}
}

// Convert builds the domain for vmi. The VMI must already carry KubeVirt's
// defaults (internal/vmi applies them); the converter does not guess.
func Convert(vmi *v1.VirtualMachineInstance, c *facts.Context) (*libvirtxml.Domain, error) {
	if vmi == nil {
		return nil, fmt.Errorf("convert: no VMI")
	}
	if c == nil {
		return nil, fmt.Errorf("convert %s/%s: no context", vmi.Namespace, vmi.Name)
	}
	dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}}
	for _, step := range Configurators(c) {
		if err := step.Configure(vmi, dom); err != nil {
			return nil, fmt.Errorf("convert %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
	}
	return dom, nil
}

// Disks converts only vmi's disks: the <disk> elements its domain has, for
// comparing with a running domain (hotplug) without building the rest.
func Disks(vmi *v1.VirtualMachineInstance, c *facts.Context) ([]libvirtxml.DomainDisk, error) {
	dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}}
	if err := storage.New(c).Configure(vmi, dom); err != nil {
		return nil, fmt.Errorf("convert %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return dom.Devices.Disks, nil
}

// Interfaces converts only vmi's interfaces: the <interface> elements its
// domain has, for plugging one into a running domain (hotplug).
func Interfaces(vmi *v1.VirtualMachineInstance, c *facts.Context) ([]libvirtxml.DomainInterface, error) {
	dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}}
	if err := network.New(c).Configure(vmi, dom); err != nil {
		return nil, fmt.Errorf("convert %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return dom.Devices.Interfaces, nil
}
