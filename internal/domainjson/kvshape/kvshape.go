// Package kvshape restates the JSON shape of KubeVirt's api.Domain (the
// object virt-handler reads from GetDomain's `domain` and from notify
// events' `domainJSON`), for tests. Key names come from kubevirt-wire.md
// 3.3 and value types from KubeVirt's schema; the structs are written
// independently of domainjson.Domain so that decoding our output into them
// checks it against KubeVirt rather than against itself.
//
// Decode is case-sensitive (as virt-handler decodes, sigs.k8s.io/json) and
// strict: a key KubeVirt's structs do not have, a wrongly cased key, or a
// value of the wrong JSON type is an error. Parts the handler never reads
// are json.RawMessage (any value passes).
package kvshape

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	kjson "sigs.k8s.io/json"
)

// Decode decodes data as virt-handler would, and fails on any key or type
// KubeVirt's structs would not accept.
func Decode(data []byte) (*Domain, error) {
	var d Domain
	strict, err := kjson.UnmarshalStrict(data, &d)
	if err != nil {
		return nil, fmt.Errorf("decode as KubeVirt Domain: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decode as KubeVirt Domain: %w", errors.Join(strict...))
	}
	return &d, nil
}

// Domain is api.Domain: TypeMeta flattened, then ObjectMeta, Spec, Status.
type Domain struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	ObjectMeta ObjectMeta
	Spec       DomainSpec
	Status     DomainStatus
}

// ObjectMeta is the part of metav1.ObjectMeta the launcher fills (lower-case keys).
type ObjectMeta struct {
	Name              string     `json:"name"`
	Namespace         string     `json:"namespace"`
	UID               string     `json:"uid"`
	CreationTimestamp *time.Time `json:"creationTimestamp"`
	DeletionTimestamp *time.Time `json:"deletionTimestamp"`
}

// XMLName is encoding/xml.Name as the JSON encoder writes it.
type XMLName struct{ Space, Local string }

// DomainSpec is api.DomainSpec (key `Spec`).
type DomainSpec struct {
	XMLName        XMLName
	Type           string
	XmlNS          string
	Name           string
	UUID           string
	Memory         Memory
	CurrentMemory  *Memory
	MaxMemory      json.RawMessage
	MemoryBacking  json.RawMessage
	OS             OS
	SysInfo        json.RawMessage
	Devices        Devices
	Clock          json.RawMessage
	Resource       json.RawMessage
	QEMUCmd        json.RawMessage
	Metadata       Metadata
	Features       *Features
	CPU            json.RawMessage
	VCPU           json.RawMessage
	VCPUs          json.RawMessage
	CPUTune        *CPUTune
	NUMATune       json.RawMessage
	IOThreads      json.RawMessage
	LaunchSecurity json.RawMessage
	OnReboot       json.RawMessage
	IOMMUFD        json.RawMessage
}

// Metadata is api.Metadata (`Spec.Metadata`).
type Metadata struct{ KubeVirt KubeVirtMetadata }

// KubeVirtMetadata is api.KubeVirtMetadata (`Spec.Metadata.KubeVirt`).
type KubeVirtMetadata struct {
	UID              string
	GracePeriod      *GracePeriod
	Migration        *Migration
	Backup           *Backup
	AccessCredential *struct {
		Succeeded bool
		Message   string
	}
	MemoryDump *MemoryDump
}

// GracePeriod is api.GracePeriodMetadata.
type GracePeriod struct {
	DeletionGracePeriodSeconds int64
	DeletionTimestamp          *time.Time
	MarkedForGracefulShutdown  *bool
}

// Migration is api.MigrationMetadata.
type Migration struct {
	UID            string
	StartTimestamp *time.Time
	EndTimestamp   *time.Time
	Failed         bool
	FailureReason  string
	AbortStatus    string
	Mode           string
}

// Backup is api.BackupMetadata.
type Backup struct {
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

// MemoryDump is api.MemoryDumpMetadata.
type MemoryDump struct {
	FileName       string
	StartTimestamp *time.Time
	EndTimestamp   *time.Time
	Completed      bool
	Failed         bool
	FailureReason  string
}

// Memory is api.Memory (Memory, CurrentMemory).
type Memory struct {
	Value uint64
	Unit  string
}

// OS is api.OS.
type OS struct {
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

// Devices is api.Devices.
type Devices struct {
	Emulator     string
	Interfaces   []Interface
	Channels     []Channel
	HostDevices  []HostDevice
	PanicDevices json.RawMessage
	Controllers  json.RawMessage
	Video        json.RawMessage
	Graphics     json.RawMessage
	Ballooning   json.RawMessage
	Disks        []Disk
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

// Alias is api.Alias in its custom JSON form (name without `ua-`).
type Alias struct {
	Name        string
	UserDefined bool
}

// Interface is api.Interface.
type Interface struct {
	XMLName             XMLName
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
	Alias               *Alias
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

// Disk is api.Disk.
type Disk struct {
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
	Alias              *Alias
	BackingStore       json.RawMessage
	BootOrder          json.RawMessage
	Address            json.RawMessage
	Model              string
	BlockIO            json.RawMessage
	FilesystemOverhead *string
	Capacity           *int64
	Shareable          *struct{}
}

// HostDevice is api.HostDevice.
type HostDevice struct {
	XMLName   XMLName
	Source    json.RawMessage
	Type      string
	BootOrder json.RawMessage
	Managed   string
	Mode      string
	Model     string
	Address   json.RawMessage
	Alias     *Alias
	Display   string
	RamFB     string
	Driver    json.RawMessage
	ACPI      json.RawMessage
}

// Channel is api.Channel.
type Channel struct {
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

// Features is api.Features; ACPI is an empty object when present.
type Features struct {
	ACPI       *struct{}
	APIC       json.RawMessage
	Hyperv     json.RawMessage
	SMM        json.RawMessage
	KVM        json.RawMessage
	PVSpinlock json.RawMessage
	PMU        json.RawMessage
	VMPort     json.RawMessage
}

// CPUTune is api.CPUTune.
type CPUTune struct {
	VCPUPin     json.RawMessage
	IOThreadPin json.RawMessage
	EmulatorPin *struct{ CPUSet string }
}

// DomainStatus is api.DomainStatus (key `Status`).
type DomainStatus struct {
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
