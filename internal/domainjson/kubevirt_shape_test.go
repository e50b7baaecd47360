package domainjson

import (
	"encoding/json"
	"time"
)

// The structs below restate KubeVirt's api.Domain JSON shape from
// kubevirt-wire.md 3.3 (key names) and KubeVirt's schema (value types),
// independently of the types in this package. The tests decode our output
// into them case-sensitively and strictly: an extra, missing-in-KubeVirt or
// wrongly cased key, or a value of the wrong JSON type, fails. Parts the
// handler never reads are json.RawMessage here (any value passes).

type kvDomain struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	ObjectMeta kvObjectMeta
	Spec       kvDomainSpec
	Status     kvDomainStatus
}

type kvObjectMeta struct {
	Name              string     `json:"name"`
	Namespace         string     `json:"namespace"`
	UID               string     `json:"uid"`
	CreationTimestamp *time.Time `json:"creationTimestamp"`
	DeletionTimestamp *time.Time `json:"deletionTimestamp"`
}

type kvXMLName struct{ Space, Local string }

type kvDomainSpec struct {
	XMLName        kvXMLName
	Type           string
	XmlNS          string
	Name           string
	UUID           string
	Memory         kvMemory
	CurrentMemory  *kvMemory
	MaxMemory      json.RawMessage
	MemoryBacking  json.RawMessage
	OS             kvOS
	SysInfo        json.RawMessage
	Devices        kvDevices
	Clock          json.RawMessage
	Resource       json.RawMessage
	QEMUCmd        json.RawMessage
	Metadata       kvMetadata
	Features       *kvFeatures
	CPU            json.RawMessage
	VCPU           json.RawMessage
	VCPUs          json.RawMessage
	CPUTune        *kvCPUTune
	NUMATune       json.RawMessage
	IOThreads      json.RawMessage
	LaunchSecurity json.RawMessage
	OnReboot       json.RawMessage
	IOMMUFD        json.RawMessage
}

type kvMetadata struct{ KubeVirt kvKubeVirtMetadata }

type kvKubeVirtMetadata struct {
	UID              string
	GracePeriod      *kvGracePeriod
	Migration        *kvMigration
	Backup           *kvBackup
	AccessCredential *struct {
		Succeeded bool
		Message   string
	}
	MemoryDump *kvMemoryDump
}

type kvGracePeriod struct {
	DeletionGracePeriodSeconds int64
	DeletionTimestamp          *time.Time
	MarkedForGracefulShutdown  *bool
}

type kvMigration struct {
	UID            string
	StartTimestamp *time.Time
	EndTimestamp   *time.Time
	Failed         bool
	FailureReason  string
	AbortStatus    string
	Mode           string
}

type kvBackup struct {
	Name           string
	Mode           string
	SkipQuiesce    bool
	StartTimestamp *time.Time
	EndTimestamp   *time.Time
	Completed      bool
	Failed         bool
	BackupMsg      string
	CheckpointName string
	Volumes        string
	QuiesceStatus  string
}

type kvMemoryDump struct {
	FileName       string
	StartTimestamp *time.Time
	EndTimestamp   *time.Time
	Completed      bool
	Failed         bool
	FailureReason  string
}

type kvMemory struct {
	Value uint64
	Unit  string
}

type kvOS struct {
	Firmware     json.RawMessage
	FirmwareInfo json.RawMessage
	Type         struct{ OS, Arch, Machine string }
	ACPI         json.RawMessage
	SMBios       json.RawMessage
	BootOrder    json.RawMessage
	BootMenu     json.RawMessage
	BIOS         json.RawMessage
	BootLoader   json.RawMessage
	NVRam        json.RawMessage
	Kernel       string
	Initrd       string
	KernelArgs   string
}

type kvDevices struct {
	Emulator     string
	Interfaces   []kvInterface
	Channels     []kvChannel
	HostDevices  []kvHostDevice
	PanicDevices json.RawMessage
	Controllers  json.RawMessage
	Video        json.RawMessage
	Graphics     json.RawMessage
	Ballooning   json.RawMessage
	Disks        []kvDisk
	Inputs       json.RawMessage
	Serials      json.RawMessage
	Consoles     json.RawMessage
	Watchdogs    json.RawMessage
	Rng          json.RawMessage
	Filesystems  json.RawMessage
	Redirs       json.RawMessage
	SoundCards   json.RawMessage
	TPMs         json.RawMessage
	VSOCK        json.RawMessage
	Memory       json.RawMessage
	IOMMU        json.RawMessage
}

type kvAlias struct {
	Name        string
	UserDefined bool
}

type kvInterface struct {
	XMLName             kvXMLName
	Address             json.RawMessage
	Type                string
	TrustGuestRxFilters string
	Source              json.RawMessage
	Target              *struct{ Device, Managed string }
	Model               json.RawMessage
	MAC                 *struct{ MAC string }
	MTU                 json.RawMessage
	BandWidth           json.RawMessage
	BootOrder           json.RawMessage
	LinkState           *struct{ State string }
	FilterRef           json.RawMessage
	Alias               *kvAlias
	Driver              *struct {
		Name   string
		Queues *uint
		IOMMU  string
	}
	Rom         json.RawMessage
	ACPI        json.RawMessage
	Backend     json.RawMessage
	PortForward json.RawMessage
}

type kvDisk struct {
	Device   string
	Snapshot string
	Type     string
	Source   struct {
		Dev, File, StartupPolicy, Protocol, Name string
		Host                                     json.RawMessage
		Reservations                             json.RawMessage
		Slices                                   json.RawMessage
		DataStore                                json.RawMessage
	}
	Target             struct{ Bus, Device, Tray string }
	Serial             string
	Driver             json.RawMessage
	ReadOnly           *struct{}
	Auth               json.RawMessage
	Alias              *kvAlias
	BackingStore       json.RawMessage
	BootOrder          json.RawMessage
	Address            json.RawMessage
	Model              string
	BlockIO            json.RawMessage
	FilesystemOverhead *string
	Capacity           *int64
	Shareable          *struct{}
}

type kvHostDevice struct {
	XMLName   kvXMLName
	Source    json.RawMessage
	Type      string
	BootOrder json.RawMessage
	Managed   string
	Mode      string
	Model     string
	Address   json.RawMessage
	Alias     *kvAlias
	Display   string
	RamFB     string
	Driver    json.RawMessage
	ACPI      json.RawMessage
}

type kvChannel struct {
	Type   string
	Source json.RawMessage
	Target *struct {
		Name    string
		Type    string
		Address string
		Port    uint
		State   string
	}
}

type kvFeatures struct {
	ACPI       *struct{}
	APIC       json.RawMessage
	Hyperv     json.RawMessage
	SMM        json.RawMessage
	KVM        json.RawMessage
	PVSpinlock json.RawMessage
	PMU        json.RawMessage
	VMPort     json.RawMessage
}

type kvCPUTune struct {
	VCPUPin     json.RawMessage
	IOThreadPin json.RawMessage
	EmulatorPin *struct{ CPUSet string }
}

type kvDomainStatus struct {
	Status     string
	Reason     string
	Interfaces []struct {
		Mac           string
		Ip            string
		IPs           []string
		InterfaceName string
	}
	OSInfo struct {
		Name, KernelRelease, Version, PrettyName, VersionId, KernelVersion, Machine, Id string
	}
	FSFreezeStatus struct{ Status string }
	GuestPanicInfo *struct {
		Type                         string
		Arg1, Arg2, Arg3, Arg4, Arg5 uint64
	}
	PanicCount int
}
