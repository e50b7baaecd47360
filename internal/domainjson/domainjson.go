// Package domainjson builds the Domain object that virt-handler reads from
// GetDomain and from notify events (kubevirt-wire.md section 3).
//
// The encoding rule is KubeVirt's: struct fields carry no json tags, so each
// key is the exact Go field name (Spec, Devices, MAC, ...); only the embedded
// Kubernetes TypeMeta/ObjectMeta use lower-case keys. No launcher-defined
// struct uses omitempty: every key is always present and nil becomes null.
// virt-handler decodes case-sensitively and a type mismatch anywhere fails
// the whole object, so every field here has the JSON type of KubeVirt's.
//
// Parts of the libvirt domain that virt-handler never reads and whose shape
// we do not reproduce are json.RawMessage fields left nil: they encode as
// null, which decodes to the zero value in whatever type KubeVirt uses.
package domainjson

import (
	"encoding/json"
	"encoding/xml"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// APIVersion and Kind are the TypeMeta values KubeVirt's launcher sends.
const (
	APIVersion = "1.2.2"
	Kind       = "Domain"
)

// Metadata is the launcher's in-memory metadata store for one domain
// (kubevirt-wire.md 3.5). It is injected as Spec.Metadata.KubeVirt.
type Metadata struct {
	UID                       string
	GracePeriodSeconds        int64
	DeletionTimestamp         *time.Time
	MarkedForGracefulShutdown *bool
	// AccessCredential is the outcome of the last propagation of the
	// VMI's accessCredentials through the guest agent (nil: none yet).
	AccessCredential *AccessCredentialMetadata
	// Migration is the live migration this launcher's domain is the
	// source or the target of (nil: none).
	Migration *MigrationMetadata
	// MemoryDump is the last memory dump asked for (nil: none).
	MemoryDump *MemoryDumpMetadata
	// Backup is the last backup asked for (nil: none).
	Backup *BackupMetadata
	// DataFiles maps each changed-block-tracking overlay the domain's
	// disks use to the raw image that is its data file: libvirt 9.0
	// does not show the data file, and virt-handler reads it as the
	// disk's Source.DataStore.
	DataFiles map[string]string `json:",omitempty"`
}

// Domain is KubeVirt's api.Domain as JSON.
type Domain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"ObjectMeta"`
	Spec              DomainSpec
	Status            DomainStatus
}

// DomainSpec is the live libvirt domain in KubeVirt's JSON shape.
type DomainSpec struct {
	XMLName        xml.Name
	Type           string
	XmlNS          string //nolint:revive // KubeVirt's key.
	Name           string
	UUID           string
	Memory         Memory
	CurrentMemory  *Memory
	MaxMemory      *MaxMemory
	MemoryBacking  json.RawMessage
	OS             OS
	SysInfo        *SysInfo
	Devices        Devices
	Clock          *Clock
	Resource       *Resource
	QEMUCmd        json.RawMessage
	Metadata       DomainMetadata
	Features       *Features
	CPU            CPU
	VCPU           *VCPU
	VCPUs          json.RawMessage
	CPUTune        *CPUTune
	NUMATune       json.RawMessage
	IOThreads      *IOThreads
	LaunchSecurity json.RawMessage
	OnReboot       json.RawMessage
	IOMMUFD        json.RawMessage
}

// DomainMetadata is Spec.Metadata.
type DomainMetadata struct {
	KubeVirt KubeVirtMetadata
}

// KubeVirtMetadata is Spec.Metadata.KubeVirt.
type KubeVirtMetadata struct {
	UID              string
	GracePeriod      *GracePeriodMetadata
	Migration        *MigrationMetadata
	Backup           *BackupMetadata
	AccessCredential *AccessCredentialMetadata
	MemoryDump       *MemoryDumpMetadata
}

// GracePeriodMetadata is Spec.Metadata.KubeVirt.GracePeriod.
type GracePeriodMetadata struct {
	DeletionGracePeriodSeconds int64
	DeletionTimestamp          *metav1.Time
	MarkedForGracefulShutdown  *bool
}

// MigrationMetadata is Spec.Metadata.KubeVirt.Migration.
type MigrationMetadata struct {
	UID            string
	StartTimestamp *metav1.Time
	EndTimestamp   *metav1.Time
	Failed         bool
	FailureReason  string
	AbortStatus    string
	Mode           string
}

// BackupMetadata is Spec.Metadata.KubeVirt.Backup.
type BackupMetadata struct {
	Name           string
	Mode           string
	SkipQuiesce    bool
	StartTimestamp *metav1.Time
	EndTimestamp   *metav1.Time
	Completed      bool
	Failed         bool
	BackupMsg      string
	CheckpointName string
	Volumes        string
	QuiesceStatus  string
}

// AccessCredentialMetadata is Spec.Metadata.KubeVirt.AccessCredential.
type AccessCredentialMetadata struct {
	Succeeded bool
	Message   string
}

// MemoryDumpMetadata is Spec.Metadata.KubeVirt.MemoryDump.
type MemoryDumpMetadata struct {
	FileName       string
	StartTimestamp *metav1.Time
	EndTimestamp   *metav1.Time
	Completed      bool
	Failed         bool
	FailureReason  string
}

// Memory is a size with its unit (memory, currentMemory).
type Memory struct {
	Value uint64
	Unit  string
}

// MaxMemory is <maxMemory>.
type MaxMemory struct {
	Value uint64
	Unit  string
	Slots uint64
}

// OS is <os>.
type OS struct {
	Firmware     json.RawMessage
	FirmwareInfo json.RawMessage
	Type         OSType
	ACPI         json.RawMessage
	SMBios       *SMBios
	BootOrder    []Boot
	BootMenu     *BootMenu
	BIOS         *BIOS
	BootLoader   *Loader
	NVRam        *NVRam
	Kernel       string
	Initrd       string
	KernelArgs   string
}

// OSType is <os><type>.
type OSType struct {
	OS      string
	Arch    string
	Machine string
}

// SMBios is <os><smbios>.
type SMBios struct {
	Mode string
}

// Boot is <os><boot>.
type Boot struct {
	Dev string
}

// BootMenu is <os><bootmenu>.
type BootMenu struct {
	Enable  string
	Timeout *uint
}

// BIOS is <os><bios>.
type BIOS struct {
	UseSerial string
}

// Loader is <os><loader>.
type Loader struct {
	ReadOnly string
	Secure   string
	Type     string
	Path     string
}

// NVRam is <os><nvram>.
type NVRam struct {
	Template string
	NVRam    string
}

// SysInfo is <sysinfo type='smbios'>.
type SysInfo struct {
	Type      string
	System    []Entry
	BIOS      []Entry
	BaseBoard []Entry
	Chassis   []Entry
}

// Entry is one <entry name=...>value</entry>.
type Entry struct {
	Name  string
	Value string
}

// Clock is <clock>.
type Clock struct {
	Offset     string
	Timezone   string
	Adjustment string
	Timer      []Timer
}

// Timer is <clock><timer>.
type Timer struct {
	Name       string
	TickPolicy string
	Present    string
	Track      string
	Frequency  string
}

// Resource is <resource>.
type Resource struct {
	Partition string
}

// Features is <features>. A present feature without attributes is {}.
type Features struct {
	ACPI       *FeatureEnabled
	APIC       *FeatureEnabled
	Hyperv     json.RawMessage
	SMM        *FeatureEnabled
	KVM        *FeatureKVM
	PVSpinlock *FeatureState
	PMU        *FeatureState
	VMPort     *FeatureState
}

// FeatureEnabled encodes as {}.
type FeatureEnabled struct{}

// FeatureState is a feature with a state attribute.
type FeatureState struct {
	State string
}

// FeatureKVM is <features><kvm>.
type FeatureKVM struct {
	Hidden        *FeatureState
	HintDedicated *FeatureState
}

// CPU is <cpu>.
type CPU struct {
	Mode     string
	Model    string
	Features []CPUFeature
	Topology *CPUTopology
	NUMA     *NUMA
}

// CPUFeature is <cpu><feature>.
type CPUFeature struct {
	Name   string
	Policy string
}

// CPUTopology is <cpu><topology>.
type CPUTopology struct {
	Sockets uint32
	Cores   uint32
	Threads uint32
}

// NUMA is <cpu><numa>.
type NUMA struct {
	Cells []NUMACell
}

// NUMACell is <cpu><numa><cell>.
type NUMACell struct {
	ID           string
	CPUs         string
	Memory       uint64
	Unit         string
	MemoryAccess string
}

// VCPU is <vcpu>.
type VCPU struct {
	Placement string
	CPUs      uint32
}

// CPUTune is <cputune>.
type CPUTune struct {
	VCPUPin     []CPUTuneVCPUPin
	IOThreadPin []CPUTuneIOThreadPin
	EmulatorPin *CPUEmulatorPin
}

// CPUTuneVCPUPin is <cputune><vcpupin>.
type CPUTuneVCPUPin struct {
	VCPU   uint32
	CPUSet string
}

// CPUTuneIOThreadPin is <cputune><iothreadpin>.
type CPUTuneIOThreadPin struct {
	IOThread uint32
	CPUSet   string
}

// CPUEmulatorPin is <cputune><emulatorpin>.
type CPUEmulatorPin struct {
	CPUSet string
}

// IOThreads is <iothreads>.
type IOThreads struct {
	IOThreads uint
}

// Devices is <devices>.
type Devices struct {
	Emulator     string
	Interfaces   []Interface
	Channels     []Channel
	HostDevices  []HostDevice
	PanicDevices json.RawMessage
	Controllers  []Controller
	Video        []Video
	Graphics     []Graphics
	Ballooning   *MemBalloon
	Disks        []Disk
	Inputs       []Input
	Serials      []Serial
	Consoles     []Console
	Watchdogs    []Watchdog
	Rng          *Rng
	Filesystems  json.RawMessage
	Redirs       json.RawMessage
	SoundCards   json.RawMessage
	TPMs         json.RawMessage
	VSOCK        json.RawMessage
	Memory       json.RawMessage
	IOMMU        json.RawMessage
}

// Alias is a device alias. In XML a user-defined alias carries the "ua-"
// prefix; in JSON the prefix is removed and UserDefined says it was there.
type Alias struct {
	Name        string
	UserDefined bool
}

// UserAliasPrefix marks aliases chosen by the launcher (volume and interface
// names) rather than by libvirt.
const UserAliasPrefix = "ua-"

// NewAlias parses an XML alias name.
func NewAlias(xmlName string) *Alias {
	if name, ok := strings.CutPrefix(xmlName, UserAliasPrefix); ok {
		return &Alias{Name: name, UserDefined: true}
	}
	return &Alias{Name: xmlName}
}

// Address is a device address; all values are strings, as in libvirt XML
// (PCI numbers in hex with the 0x prefix).
type Address struct {
	Type       string
	Domain     string
	Bus        string
	Slot       string
	Function   string
	Controller string
	Target     string
	Unit       string
	UUID       string
	Device     string
	CSSID      string
	SSID       string
	DevNo      string
}

// Interface is <interface>.
type Interface struct {
	XMLName             xml.Name
	Address             *Address
	Type                string
	TrustGuestRxFilters string
	Source              InterfaceSource
	Target              *InterfaceTarget
	Model               *Model
	MAC                 *MAC
	MTU                 *MTU
	BandWidth           json.RawMessage
	BootOrder           *BootOrder
	LinkState           *LinkState
	FilterRef           *FilterRef
	Alias               *Alias
	Driver              *InterfaceDriver
	Rom                 *Rom
	ACPI                *ACPI
	Backend             *InterfaceBackend
	PortForward         json.RawMessage
}

// InterfaceSource is <interface><source>.
type InterfaceSource struct {
	Network string
	Device  string
	Bridge  string
	Mode    string
	Address *Address
}

// InterfaceTarget is <interface><target>.
type InterfaceTarget struct {
	Device  string
	Managed string
}

// Model is a device model.
type Model struct {
	Type string
}

// MAC is <mac address=...>.
type MAC struct {
	MAC string
}

// MTU is <mtu size=...>.
type MTU struct {
	Size string
}

// BootOrder is <boot order=...>.
type BootOrder struct {
	Order uint
}

// LinkState is <link state=...>.
type LinkState struct {
	State string
}

// FilterRef is <filterref filter=...>.
type FilterRef struct {
	Filter string
}

// InterfaceDriver is <interface><driver>.
type InterfaceDriver struct {
	Name   string
	Queues *uint
	IOMMU  string
}

// Rom is <rom>.
type Rom struct {
	Enabled string
}

// ACPI is <acpi index=...>.
type ACPI struct {
	Index uint
}

// InterfaceBackend is <interface><backend>.
type InterfaceBackend struct {
	Type    string
	LogFile string
}

// Channel is <channel>.
type Channel struct {
	Type   string
	Source *ChannelSource
	Target *ChannelTarget
}

// ChannelSource is <channel><source>.
type ChannelSource struct {
	Mode string
	Path string
}

// ChannelTarget is <channel><target>.
type ChannelTarget struct {
	Name    string
	Type    string
	Address string
	Port    uint
	State   string
}

// HostDevice is <hostdev>.
type HostDevice struct {
	XMLName   xml.Name
	Source    HostDeviceSource
	Type      string
	BootOrder *BootOrder
	Managed   string
	Mode      string
	Model     string
	Address   *Address
	Alias     *Alias
	Display   string
	RamFB     string
	Driver    json.RawMessage
	ACPI      *ACPI
}

// HostDeviceSource is <hostdev><source>.
type HostDeviceSource struct {
	Address *Address
}

// Controller is <controller>.
type Controller struct {
	Type      string
	Index     string
	Model     string
	Driver    json.RawMessage
	Alias     *Alias
	Address   *Address
	PCIHole64 json.RawMessage
}

// Video is <video>.
type Video struct {
	Model VideoModel
}

// VideoModel is <video><model>.
type VideoModel struct {
	Type   string
	Heads  *uint
	Ram    *uint
	VRam   *uint
	VGAMem *uint
}

// Graphics is <graphics>.
type Graphics struct {
	AutoPort      string
	DefaultMode   string
	Listen        *GraphicsListen
	PasswdValidTo string
	Port          int32
	TLSPort       int
	Type          string
}

// GraphicsListen is <graphics><listen>.
type GraphicsListen struct {
	Type    string
	Address string
	Network string
	Socket  string
}

// MemBalloon is <memballoon>.
type MemBalloon struct {
	Model             string
	Stats             *Stats
	Address           *Address
	Driver            json.RawMessage
	FreePageReporting string
}

// Stats is <memballoon><stats>.
type Stats struct {
	Period uint
}

// Disk is <disk>.
type Disk struct {
	Device             string
	Snapshot           string
	Type               string
	Source             DiskSource
	Target             DiskTarget
	Serial             string
	Driver             *DiskDriver
	ReadOnly           *FeatureEnabled
	Auth               json.RawMessage
	Alias              *Alias
	BackingStore       json.RawMessage
	BootOrder          *BootOrder
	Address            *Address
	Model              string
	BlockIO            *BlockIO
	FilesystemOverhead json.RawMessage
	Capacity           *int64
	Shareable          *FeatureEnabled
}

// DiskSource is <disk><source>.
type DiskSource struct {
	Dev           string
	File          string
	StartupPolicy string
	Protocol      string
	Name          string
	Host          *DiskSourceHost
	Reservations  json.RawMessage
	Slices        json.RawMessage
	DataStore     json.RawMessage
}

// DiskSourceHost is <disk><source><host>.
type DiskSourceHost struct {
	Name string
	Port string
}

// DiskTarget is <disk><target>.
type DiskTarget struct {
	Bus    string
	Device string
	Tray   string
}

// DiskDriver is <disk><driver>.
type DiskDriver struct {
	Cache       string
	ErrorPolicy string
	IO          string
	Name        string
	Type        string
	IOThread    *uint
	IOThreads   json.RawMessage
	Queues      *uint
	Discard     string
	IOMMU       string
}

// BlockIO is <disk><blockio>.
type BlockIO struct {
	LogicalBlockSize   uint
	PhysicalBlockSize  uint
	DiscardGranularity *uint
}

// Input is <input>.
type Input struct {
	Type    string
	Bus     string
	Alias   *Alias
	Address *Address
	Model   string
}

// Serial is <serial>.
type Serial struct {
	Type   string
	Target *SerialTarget
	Source *SerialSource
	Alias  *Alias
	Log    *SerialLog
}

// SerialTarget is <serial><target>.
type SerialTarget struct {
	Port *uint
}

// SerialSource is a chardev <source> of a serial or console.
type SerialSource struct {
	Mode string
	Path string
}

// SerialLog is <serial><log>.
type SerialLog struct {
	File   string
	Append string
}

// Console is <console>.
type Console struct {
	Type   string
	Target *ConsoleTarget
	Source *SerialSource
	Alias  *Alias
}

// ConsoleTarget is <console><target>.
type ConsoleTarget struct {
	Type *string
	Port *uint
}

// Watchdog is <watchdog>.
type Watchdog struct {
	Model   string
	Action  string
	Alias   *Alias
	Address *Address
}

// Rng is <rng>.
type Rng struct {
	Model   string
	Backend *RngBackend
	Address *Address
	Driver  json.RawMessage
}

// RngBackend is <rng><backend>.
type RngBackend struct {
	Model  string
	Source string
}

// DomainStatus is Status.
type DomainStatus struct {
	Status         string
	Reason         string
	Interfaces     []InterfaceStatus
	OSInfo         GuestOSInfo
	FSFreezeStatus FSFreeze
	GuestPanicInfo *GuestPanicInfo
	PanicCount     int
}

// InterfaceStatus is a guest-agent reported interface.
type InterfaceStatus struct {
	Mac           string
	Ip            string //nolint:revive // KubeVirt's key.
	IPs           []string
	InterfaceName string
}

// GuestOSInfo is the guest-agent reported OS.
type GuestOSInfo struct {
	Name          string
	KernelRelease string
	Version       string
	PrettyName    string
	VersionId     string //nolint:revive // KubeVirt's key.
	KernelVersion string
	Machine       string
	Id            string //nolint:revive // KubeVirt's key.
}

// FSFreeze is the guest file-system freeze status.
type FSFreeze struct {
	Status string
}

// GuestPanicInfo describes a guest panic.
type GuestPanicInfo struct {
	Type string
	Arg1 uint64
	Arg2 uint64
	Arg3 uint64
	Arg4 uint64
	Arg5 uint64
}
