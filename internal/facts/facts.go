// Package facts holds what the converter needs to know about the world
// outside the VMI: file formats, device addresses, cluster settings, paths.
// The launcher, disks and netsetup gather these from the real system (and
// domain and cmdserver pass them on); tests and fuzzing make them up. It
// is the vocabulary they share, so it belongs to none of them. Keeping the
// facts in one plain struct is what makes the converter pure.
package facts

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// Configurator fills in one concern of the domain (one device kind, or one
// top-level element group). Configurators run in a fixed order; each reads the
// VMI and the facts it was built with and writes only its own part of dom.
type Configurator interface {
	Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error
}

// SMBIOS is the cluster's SMBIOS system information (virt-handler sends it in
// VirtualMachineOptions).
type SMBIOS struct {
	Manufacturer, Product, Version, SKU, Family string
}

// EFI names the firmware files found in --ovmf-path. An empty name means the
// file is not installed; the converter refuses a VMI that needs it.
type EFI struct {
	Code, Vars             string // insecure boot
	SecureCode, SecureVars string // secure boot
}

// Volume holds facts about one volume's backing storage.
type Volume struct {
	// Format of the image a containerDisk or ephemeral overlay sits on
	// ("raw" or "qcow2"), as qemu-img reports it.
	BackingFormat string
	// Block is true when the volume is a block device, not a file.
	Block bool
	// NoDirectIO is true when the image's file system refuses O_DIRECT, so
	// cache=none cannot be used (KubeVirt then picks writethrough).
	NoDirectIO bool
	// Preallocated volumes get no discard=unmap, and io=native with cache=none.
	Preallocated bool
	// LogicalBlockSize and PhysicalBlockSize are the probed block sizes of
	// the volume, used for disks with blockSize.matchVolume. 0 means unknown:
	// the disk then gets QEMU's defaults.
	LogicalBlockSize, PhysicalBlockSize uint
}

// Interface holds what the network phase learned about one VMI interface.
type Interface struct {
	MAC string // pod interface MAC when the spec gives none
	MTU uint   // pod interface MTU; 0 leaves it to libvirt
	Tap string // tap device name; empty means derive it as KubeVirt does
}

// NUMACell is one host NUMA node and its CPUs.
type NUMACell struct {
	ID   uint
	CPUs []HostCPU
}

// HostCPU is one host CPU and the CPUs of its core (itself included; empty
// when the host does not say).
type HostCPU struct {
	ID       uint
	Siblings []uint
}

// Context is every outside fact the converter may use. The zero value plus
// DefaultContext's settings describe a plain amd64 KubeVirt node.
type Context struct {
	Layout layout.Layout

	// Arch is the guest architecture in GOARCH spelling: amd64, arm64, s390x.
	Arch string
	// Emulation makes the domain type "qemu" (TCG) instead of "kvm" and
	// replaces host CPU models, which TCG cannot provide.
	Emulation bool
	// NonRoot selects the non-root paths (NVRAM under the private dir).
	NonRoot bool
	// VirtioMemAtDefine defines the virtio-mem device of a VM that can
	// take more memory (maxGuest above guest) with the domain, plugging
	// nothing, for a hypervisor that cannot hotplug the device itself
	// (QEMU before 8.0 crashes on it); memory hotplug then only grows it.
	VirtioMemAtDefine bool

	SMBIOS                    SMBIOS
	MemBalloonStatsPeriod     uint32
	FreePageReportingDisabled bool
	SerialConsoleLogDisabled  bool
	BochsForEFIGuests         bool
	UseLaunchSecurity         bool
	// PCIPlacement is what virt-handler asks of the host devices'
	// placement beyond the spec.
	PCIPlacement PCIPlacement

	EFI EFI

	// Volumes by volume name.
	Volumes map[string]Volume
	// Interfaces by VMI interface name.
	Interfaces map[string]Interface
	// DomainAttachments is virt-handler's InterfaceDomainAttachment: "tap"
	// for a binding plugin's interface the domain gets as a tap (the
	// plugin's domainAttachmentType tap or managedTap), by interface name.
	// A plugin's interface without one is left to its sidecar.
	DomainAttachments map[string]string
	// CPUSet is the pod's host CPUs, in order: the CPU set of the
	// launcher's cgroup, which a CPU manager narrows to the dedicated CPUs
	// of a VMI with dedicatedCpuPlacement. vCPUs, an isolated emulator
	// thread and I/O threads are placed on these.
	CPUSet []uint
	// HostNUMA is the host's NUMA topology (virt-handler's, else the
	// launcher's own reading of /sys): which cell each CPU is in and which
	// CPUs share a core. Dedicated vCPUs keep a guest core's threads on one
	// host core where they can, and NUMA passthrough mirrors the cells.
	// Empty: each CPU of CPUSet is a core of its own in cell 0.
	HostNUMA []NUMACell
	// FreeHugepages is how many hugepages of each size (in bytes) the host
	// has free now; nil when unknown (nothing is checked then).
	FreeHugepages map[uint64]uint64

	// Devices is what the pod tells the launcher about the host devices
	// given to it.
	Devices Devices
}

// PCIPlacement carries two of virt-handler's Sync options (KubeVirt v1.9):
// NUMAAware is ClusterConfig.PCINUMAAwareTopologyEnabled (the
// PCINUMAAwareTopology gate: a VMI with dedicated CPUs gets its PCI host
// devices behind a pcie-expander-bus per host NUMA node), GraceAliases the
// host devices to set up for NVIDIA Grace I/O virtualization
// (graceHostDeviceAliases).
type PCIPlacement struct {
	NUMAAware    bool
	GraceAliases []string
}

// Devices is what a KubeVirt pod tells its launcher about the host devices
// its device plugins, Multus and DRA drivers gave it (kubevirt-conversion.md
// B.12). The converter hands them out to the VMI's GPUs, host devices and
// SR-IOV interfaces as KubeVirt's launcher does.
type Devices struct {
	// Env is the device plugins' part of the launcher's environment: the
	// variables PCI_RESOURCE_<R>, MDEV_PCI_RESOURCE_<R> and
	// USB_RESOURCE_<R> (R the resource name upper-cased, '/' and '.' made
	// '_'), each a comma-separated list of host PCI addresses, mediated
	// device UUIDs or USB bus:device numbers.
	Env map[string]string
	// NetworkPCI is the host PCI address of each SR-IOV network by the
	// VMI's network name, from the network-info file (Multus's network
	// status through the downward API). Nil when the file could not be
	// read; NetworkInfoErr then says why.
	NetworkPCI     map[string]string
	NetworkInfoErr string
	// DRA is the device each DRA claim request got, from the DRA drivers'
	// metadata files, by the VMI's claim name and request name.
	DRA map[DRARequest]DRADevice
	// IOMMUFD is set when the pod holds the IOMMUFD device plugin's socket
	// (layout.IOMMUFDSocket): KubeVirt's launcher then takes an IOMMUFD
	// descriptor from it for the domain's <iommufd>.
	IOMMUFD bool
}

// DRARequest names one request of a resource claim of the VMI
// (spec.resourceClaims[].name and the request's name).
type DRARequest struct{ Claim, Request string }

// DRADevice is the device a DRA driver allocated for one request: a PCI
// device, a mediated device (a vGPU), or why it could not be read.
type DRADevice struct {
	PCIBusID string
	MDevUUID string
	Err      string
}

// Default returns the facts of a stock KubeVirt amd64 node with default
// cluster settings, in the given layout.
func Default(l layout.Layout) *Context {
	return &Context{
		Layout:                l,
		Arch:                  "amd64",
		NonRoot:               true,
		SMBIOS:                SMBIOS{Manufacturer: "KubeVirt", Product: "None", Family: "KubeVirt"},
		MemBalloonStatsPeriod: 10,
		BochsForEFIGuests:     true,
		EFI: EFI{
			Code:       "/usr/share/OVMF/OVMF_CODE_4M.fd",
			Vars:       "/usr/share/OVMF/OVMF_VARS_4M.fd",
			SecureCode: "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
			SecureVars: "/usr/share/OVMF/OVMF_VARS_4M.ms.fd",
		},
	}
}
