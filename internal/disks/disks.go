// Package disks prepares the files a VMI's disks need before the domain is
// defined (qcow2 overlays, empty disks, sparse host disks, cloud-init and
// config ISOs) and gathers the facts the converter needs about them (image
// formats, block or file, O_DIRECT support).
//
// Every path comes from layout.Layout. Every file is created atomically: it is
// written under a temporary name in its final directory, synced and renamed,
// so a crash or a full disk never leaves a half-made image where QEMU would
// pick it up. Files that already exist and hold guest data (overlays, empty
// disks, host disks) are never recreated.
package disks

import (
	"log/slog"
	"sync"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// DefaultMemoryLimit is KubeVirt's --disk-memory-limit default: the address
// space allowed to the qemu-img probe of an untrusted container disk.
const DefaultMemoryLimit int64 = 2097152000

// Owner is the user and group QEMU runs as; created files and directories are
// given to it.
type Owner struct{ UID, GID int }

// Preparer gathers facts about a VMI's volumes and creates their files.
type Preparer struct {
	Layout layout.Layout
	Log    *slog.Logger
	// Owner of created files and directories; nil leaves them to the caller's
	// uid/gid.
	Owner *Owner
	// QemuImg is the qemu-img binary; empty means "qemu-img" from PATH.
	QemuImg string
	// MemoryLimit is the address-space limit (bytes) of the qemu-img probe;
	// 0 means DefaultMemoryLimit.
	MemoryLimit int64
	// Hooks, when set, may change the cloud-init data before its ISO is
	// written (the hook sidecars' PreCloudInitIso).
	Hooks CloudInitHook
	// ImageVolume (--image-volume): container disks and the kernel-boot
	// image are image volumes; Gather first links their files into the
	// classic paths (LinkImageVolumes).
	ImageVolume bool
	// Root: the launcher runs as root (a root pod), which places the
	// changed block tracking overlays (layout.CBTDir).
	Root bool

	mu sync.Mutex
	// configDrive is the ConfigDrive data the last Prepare wrote (after
	// the hooks), which ConfigDriveDevices writes again with the device
	// metadata; nil without a ConfigDrive volume.
	configDrive *CloudInitData
}

func (p *Preparer) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

func (p *Preparer) qemuImg() string {
	if p.QemuImg == "" {
		return "qemu-img"
	}
	return p.QemuImg
}

func (p *Preparer) memoryLimit() int64 {
	if p.MemoryLimit <= 0 {
		return DefaultMemoryLimit
	}
	return p.MemoryLimit
}

// hostname is the guest's host name as KubeVirt derives it: spec.hostname or
// the VMI name, cut to the 63 bytes a DNS label allows.
func hostname(vmi *v1.VirtualMachineInstance) string {
	h := vmi.Name
	if vmi.Spec.Hostname != "" {
		h = vmi.Spec.Hostname
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}
