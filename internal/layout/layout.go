// Package layout knows where every file of a launcher lives: the directories
// KubeVirt's pod template mounts, and the file names inside them that
// virt-handler, the converter and the disk preparation must agree on.
//
// In a pod the roots are KubeVirt's fixed paths; standalone they all move
// under one working directory (see Under), so several launchers can share a
// machine without touching /var/run.
package layout

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Files the pod gives its launcher about host devices, at fixed paths no
// flag moves: Multus's network status of the pod's networks through the
// downward API (an SR-IOV network's virtual function), the DRA drivers'
// device metadata (KEP-5304), one directory per claim request, and the
// socket through which KubeVirt's IOMMUFD device plugin hands over an
// opened /dev/iommu (its IOMMUFD feature gate puts one in every pod).
const (
	NetworkInfoFile = "/etc/podinfo/network-info"
	DRAMetadataDir  = "/var/run/kubernetes.io/dra-device-attributes"
	IOMMUFDSocket   = "/var/run/kubevirt/iommufd.sock"
)

// Layout holds the root directories. Every path a launcher builds is derived
// from these by the methods below; nothing else in the tree joins paths from
// user input.
type Layout struct {
	ShareDir         string // /var/run/kubevirt
	PrivateDir       string // /var/run/kubevirt-private
	EphemeralDiskDir string // /var/run/kubevirt-ephemeral-disks
	ContainerDiskDir string // /var/run/kubevirt/container-disks
	HotplugDiskDir   string // /var/run/kubevirt/hotplug-disks
	LibvirtRunDir    string // /var/run/libvirt (empty disks live here in KubeVirt)
	// HooksDir holds one directory per hook sidecar container (the pod's
	// hook-sidecar-sockets volume; sidecar N sees its hook-sidecar-N
	// subdirectory as its own /var/run/kubevirt-hooks), each with the
	// sidecar's gRPC socket.
	HooksDir string // /var/run/kubevirt-hooks
	// BlockDeviceDir holds block PVCs' device nodes: /dev in a pod; a
	// standalone launcher shares the host's /dev, so its block volumes
	// live below its own directory instead. Empty means /dev.
	BlockDeviceDir string

	// With KubeVirt's ImageVolume feature gate (--image-volume) the pod
	// mounts each container disk's image read-only as a Kubernetes image
	// volume at <ImageVolumeDir>/disk_<N>, and a kernelBoot container's
	// image at KernelBootVolumeDir; the launcher links the files it needs
	// from there into ContainerDiskDir.
	ImageVolumeDir      string // /var/run/kubevirt-image-volume
	KernelBootVolumeDir string // /var/run/kubevirt-kernel-boot
}

// Default is the layout inside a KubeVirt launcher pod.
func Default() Layout {
	return Layout{
		ShareDir:         "/var/run/kubevirt",
		PrivateDir:       "/var/run/kubevirt-private",
		EphemeralDiskDir: "/var/run/kubevirt-ephemeral-disks",
		ContainerDiskDir: "/var/run/kubevirt/container-disks",
		HotplugDiskDir:   "/var/run/kubevirt/hotplug-disks",
		LibvirtRunDir:    "/var/run/libvirt",
		HooksDir:         "/var/run/kubevirt-hooks",
		BlockDeviceDir:   "/dev",

		ImageVolumeDir:      "/var/run/kubevirt-image-volume",
		KernelBootVolumeDir: "/var/run/kubevirt-kernel-boot",
	}
}

// Under places every root below dir, for a standalone launcher. The names are
// short on purpose: unix socket paths are limited to 107 bytes.
func Under(dir string) Layout {
	return Layout{
		ShareDir:         filepath.Join(dir, "share"),
		PrivateDir:       filepath.Join(dir, "private"),
		EphemeralDiskDir: filepath.Join(dir, "ephemeral"),
		ContainerDiskDir: filepath.Join(dir, "share", "container-disks"),
		HotplugDiskDir:   filepath.Join(dir, "share", "hotplug-disks"),
		LibvirtRunDir:    filepath.Join(dir, "libvirt-run"),
		HooksDir:         filepath.Join(dir, "hooks"),
		BlockDeviceDir:   filepath.Join(dir, "dev"),

		ImageVolumeDir:      filepath.Join(dir, "imagevol"),
		KernelBootVolumeDir: filepath.Join(dir, "kernelvol"),
	}
}

// PodDirs are the directories a launcher finds made when it starts: in a
// cluster the pod's emptyDir volumes (private, public with its sockets,
// ephemeral disks, libvirt's run dir, hotplug disks and, without KubeVirt's
// ImageVolume feature gate, the container disks that virt-handler fills,
// kernel-boot included); on a plain machine whoever plays the pod makes them
// (internal/pod). BlockDeviceDir is one of them when it is not the host's
// /dev.
func (l Layout) PodDirs(imageVolume bool) []string {
	dirs := []string{l.ShareDir, l.SocketsDir(), l.PrivateDir, l.EphemeralDiskDir, l.HotplugDiskDir, l.LibvirtRunDir}
	if !imageVolume {
		dirs = append(dirs, l.ContainerDiskDir, l.KernelBootDir())
	}
	if l.BlockDeviceDir != "" && l.BlockDeviceDir != "/dev" {
		dirs = append(dirs, l.BlockDeviceDir)
	}
	return dirs
}

// Rooted is a pod's layout (Default) as seen from outside the pod, when
// the pod's /var/run is the directory run: for a launcher image run as a
// pod on a plain machine (internal/pod.ImagePod). Paths outside /var/run
// (the block devices' /dev) stay as they are.
func Rooted(run string) Layout {
	l := Default()
	for _, p := range []*string{&l.ShareDir, &l.PrivateDir, &l.EphemeralDiskDir, &l.ContainerDiskDir, &l.HotplugDiskDir,
		&l.LibvirtRunDir, &l.HooksDir, &l.BlockDeviceDir, &l.ImageVolumeDir, &l.KernelBootVolumeDir} {
		if rest, ok := strings.CutPrefix(*p, "/var/run/"); ok {
			*p = filepath.Join(run, rest)
		}
	}
	return l
}

// CheckName refuses a name that could leave its directory when used as a
// path element. Volume names are validated as DNS-1123 labels earlier; this is
// the last line of defence for every path built from user input.
func CheckName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("name %q cannot be used as a file name", name)
	}
	return nil
}

// SocketsDir holds launcher-init-sock / launcher-sock.
func (l Layout) SocketsDir() string { return filepath.Join(l.ShareDir, "sockets") }

// InitSocket is where the command server listens before it is ready.
func (l Layout) InitSocket() string { return filepath.Join(l.SocketsDir(), "launcher-init-sock") }

// ReadySocket is the name the init socket is renamed to once ready.
func (l Layout) ReadySocket() string { return filepath.Join(l.SocketsDir(), "launcher-sock") }

// NotifySocket is the handler's event pipe inside the pod.
func (l Layout) NotifySocket() string { return filepath.Join(l.ShareDir, "domain-notify-pipe.sock") }

// The ports KubeVirt's migration proxies name their sockets after
// (pkg/virt-handler/migration-proxy LibvirtDirectMigrationPort and
// LibvirtBlockMigrationPort): QEMU's memory stream, and the NBD server
// that copies the disks of a block migration. Port 0 names the libvirt
// connection itself.
const (
	DirectMigrationPort = 49152
	BlockMigrationPort  = 49153
)

// MigrationProxyDir holds a live migration's unix sockets
// (<share dir>/migrationproxy, KubeVirt's SourceUnixFile): virt-handler's
// proxy listens there in the source pod, and the target pod's QEMU and NBD
// server listen at the same paths, since libvirt hands the source's
// migrate_uri and disks_uri to the destination unchanged.
func (l Layout) MigrationProxyDir() string { return filepath.Join(l.ShareDir, "migrationproxy") }

// MigrationSocket is the socket of one migration stream of the VMI uid:
// <uid>-source.sock for port 0 (the libvirt connection, the source's
// qemu+unix destination URI), else <uid>-<port>-source.sock (KubeVirt's
// ConstructProxyKey: the port is appended only when it is not 0).
func (l Layout) MigrationSocket(uid string, port int) string {
	key := uid
	if port != 0 {
		key += "-" + strconv.Itoa(port)
	}
	return filepath.Join(l.MigrationProxyDir(), key+"-source.sock")
}

// VirtiofsDir holds the vhost-user sockets of the VMI's virtiofs
// filesystems (<share dir>/virtiofs-containers: in a pod, the emptyDir
// virt-controller shares between the compute container and each
// filesystem's virtiofsd container).
func (l Layout) VirtiofsDir() string { return filepath.Join(l.ShareDir, "virtiofs-containers") }

// VirtiofsSocket is where the virtiofsd of filesystem name listens and
// QEMU connects: <name>.sock in VirtiofsDir.
func (l Layout) VirtiofsSocket(name string) string {
	return filepath.Join(l.VirtiofsDir(), name+".sock")
}

// VMIPrivateDir holds the serial console, its log and the VNC socket.
func (l Layout) VMIPrivateDir(uid string) string { return filepath.Join(l.PrivateDir, uid) }

// SerialSocket is the serial console's unix socket.
func (l Layout) SerialSocket(uid string) string {
	return filepath.Join(l.VMIPrivateDir(uid), "virt-serial0")
}

// SerialLog is the serial console's log file.
func (l Layout) SerialLog(uid string) string {
	return filepath.Join(l.VMIPrivateDir(uid), "virt-serial0-log")
}

// VNCSocket is the VNC server's unix socket.
func (l Layout) VNCSocket(uid string) string { return filepath.Join(l.VMIPrivateDir(uid), "virt-vnc") }

// USBRedirSocket is the n-th USB redirection socket.
func (l Layout) USBRedirSocket(uid string, n int) string {
	return filepath.Join(l.VMIPrivateDir(uid), "virt-usbredir-"+strconv.Itoa(n))
}

// ContainerDiskImage is the n-th container disk (n = index in spec.volumes):
// bind-mounted by virt-handler, or with --image-volume a link into
// ImageVolume(n).
func (l Layout) ContainerDiskImage(n int) string {
	return filepath.Join(l.ContainerDiskDir, fmt.Sprintf("disk_%d.img", n))
}

// ImageVolume is where the image of the n-th container disk (n = index in
// spec.volumes) is mounted with --image-volume.
func (l Layout) ImageVolume(n int) string {
	return filepath.Join(l.ImageVolumeDir, fmt.Sprintf("disk_%d", n))
}

// KernelBootDir holds the kernel and initrd of a kernelBoot container (with
// --image-volume, links into KernelBootVolumeDir).
func (l Layout) KernelBootDir() string { return filepath.Join(l.ContainerDiskDir, "kernel-boot") }

// DiskOverlay is the qcow2 overlay of a containerDisk or ephemeral volume.
func (l Layout) DiskOverlay(vol string) string {
	return filepath.Join(l.EphemeralDiskDir, "disk-data", vol, "disk.qcow2")
}

// CloudInitNoCloudISO is the NoCloud seed image.
func (l Layout) CloudInitNoCloudISO(namespace, name string) string {
	return filepath.Join(l.EphemeralDiskDir, "cloud-init-data", namespace, name, "noCloud.iso")
}

// IgnitionFile is where the launcher writes the kubevirt.io/ignitiondata
// annotation for QEMU's fw_cfg.
func (l Layout) IgnitionFile(namespace, name string) string {
	return filepath.Join(l.EphemeralDiskDir, "ignition-data", namespace, name, "data.ign")
}

// CloudInitConfigDriveISO is the ConfigDrive seed image.
func (l Layout) CloudInitConfigDriveISO(namespace, name string) string {
	return filepath.Join(l.EphemeralDiskDir, "cloud-init-data", namespace, name, "configdrive.iso")
}

// EmptyDisk is the qcow2 image of an emptyDisk volume.
func (l Layout) EmptyDisk(vol string) string {
	return filepath.Join(l.LibvirtRunDir, "empty-disks", vol+".qcow2")
}

// PVCDisk is where a filesystem PVC / DataVolume (or a handler-rewritten
// hostDisk) image lives.
func (l Layout) PVCDisk(vol string) string {
	return filepath.Join(l.PrivateDir, "vmi-disks", vol, "disk.img")
}

// HostDisk is where a hostDisk volume's image is reached inside the pod:
// only the base name of the user's path is used, and a path whose last
// element cannot be a file name ("", "/", ".", "..") is refused.
func (l Layout) HostDisk(vol, path string) (string, error) {
	base := filepath.Base(path)
	if path == "" || base == "/" || CheckName(base) != nil {
		return "", fmt.Errorf("hostDisk.path %q: must name a file", path)
	}
	return filepath.Join(l.PrivateDir, "vmi-disks", vol, base), nil
}

// BlockDevice is the device node of a block PVC.
func (l Layout) BlockDevice(vol string) string {
	if l.BlockDeviceDir == "" {
		return filepath.Join("/dev", vol)
	}
	return filepath.Join(l.BlockDeviceDir, vol)
}

// HotplugFile and HotplugBlock are a hotplugged volume's image or device.
func (l Layout) HotplugFile(vol string) string  { return filepath.Join(l.HotplugDiskDir, vol+".img") }
func (l Layout) HotplugBlock(vol string) string { return filepath.Join(l.HotplugDiskDir, vol) }

// ConfigMapISO, SecretISO, DownwardAPIISO, SysprepISO are the ISOs built from
// the matching source directories below.
func (l Layout) ConfigMapISO(vol string) string {
	return filepath.Join(l.PrivateDir, "config-map-disks", vol+".iso")
}
func (l Layout) SecretISO(vol string) string {
	return filepath.Join(l.PrivateDir, "secret-disks", vol+".iso")
}
func (l Layout) DownwardAPIISO(vol string) string {
	return filepath.Join(l.PrivateDir, "downwardapi-disks", vol+".iso")
}
func (l Layout) SysprepISO(vol string) string {
	return filepath.Join(l.PrivateDir, "sysprep-disks", vol+".iso")
}
func (l Layout) ServiceAccountISO() string {
	return filepath.Join(l.PrivateDir, "service-account-disk", "service-account.iso")
}
func (l Layout) DownwardMetricsDisk() string {
	return filepath.Join(l.PrivateDir, "downwardapi-disks", "vhostmd0")
}

// MigrationHookSocket is where a migration target's pre-migration hook
// server listens for the libvirt hook client.
func (l Layout) MigrationHookSocket() string {
	return filepath.Join(l.ShareDir, "migration-hook-socket")
}

// MigratedMarker is the file a migration source leaves in the backend
// storage volume (mounted at backend-storage-meta when the VMI has one)
// once its domain has migrated away.
func (l Layout) MigratedMarker() string {
	return filepath.Join(l.PrivateDir, "backend-storage-meta", "migrated")
}

// DownwardMetricsSocket is where QEMU listens for the downwardMetrics
// device's virtio-serial port, which virt-handler connects to; the launcher
// makes its directory at start.
func (l Layout) DownwardMetricsSocket() string {
	return filepath.Join(l.PrivateDir, "downwardmetrics-channel", "downwardmetrics.sock")
}

// Source directories of config volumes, as the pod mounts them.
func (l Layout) ConfigMapSource(vol string) string {
	return filepath.Join(l.PrivateDir, "config-map", vol)
}
func (l Layout) SecretSource(vol string) string { return filepath.Join(l.PrivateDir, "secret", vol) }
func (l Layout) DownwardAPISource(vol string) string {
	return filepath.Join(l.PrivateDir, "downwardapi", vol)
}
func (l Layout) SysprepSource(vol string) string { return filepath.Join(l.PrivateDir, "sysprep", vol) }
func (l Layout) ServiceAccountSource() string {
	return filepath.Join(l.PrivateDir, "service-account")
}

// systemLibDir is the system-mode (root) libvirt daemon's state root. Its
// paths are libvirt's own, fixed at build time, so they do not move with
// Under: a root launcher only runs in a container, whose /var/lib is its own.
const systemLibDir = "/var/lib"

// NVRAMDir holds the per-VM EFI variable stores (<vmi name>_VARS.fd), in the
// directory KubeVirt's launcher and pod template agree on: in a non-root pod
// the session daemon's own nvram dir ($XDG_CONFIG_HOME/libvirt/qemu/nvram,
// below the private dir), in a root pod the system daemon's
// /var/lib/libvirt/qemu/nvram. With persistent EFI
// (firmware.bootloader.efi.persistent) virt-controller mounts the
// backend-storage volume's "nvram" subdirectory here, so the variables
// outlive the pod.
func (l Layout) NVRAMDir(root bool) string {
	if root {
		return filepath.Join(systemLibDir, "libvirt", "qemu", "nvram")
	}
	return filepath.Join(l.LibvirtDir(), "qemu", "nvram")
}

// CBTDir holds the qcow2 overlays of changed block tracking (one
// <volume>.qcow2 per tracked volume, its raw image the overlay's external
// data file), where KubeVirt's launcher and pod template agree on: in a
// root pod /var/lib/libvirt/qemu/cbt, in a non-root one below the private
// dir. virt-controller mounts the backend-storage volume's "cbt"
// subdirectory here, so the overlays and their bitmaps outlive the pod.
func (l Layout) CBTDir(root bool) string {
	if root {
		return filepath.Join(systemLibDir, "libvirt", "qemu", "cbt")
	}
	return filepath.Join(l.LibvirtDir(), "qemu", "cbt")
}

// CBTOverlay is the changed-block-tracking overlay of volume vol.
func (l Layout) CBTOverlay(vol string, root bool) string {
	return filepath.Join(l.CBTDir(root), vol+".qcow2")
}

// SwtpmDir is where libvirt keeps an emulated TPM's state (swtpm's
// <domain uuid>/tpm2 below it; the domain UUID is the firmware UUID, from
// the SMBIOS entry). libvirt 9.0 has no setting for it: the session daemon
// uses $XDG_CONFIG_HOME/libvirt/qemu/swtpm, the system daemon
// /var/lib/libvirt/swtpm. With devices.tpm.persistent virt-controller mounts
// the backend-storage volume's "swtpm" subdirectory here.
func (l Layout) SwtpmDir(root bool) string {
	if root {
		return filepath.Join(systemLibDir, "libvirt", "swtpm")
	}
	return filepath.Join(l.LibvirtDir(), "qemu", "swtpm")
}

// SwtpmLocalCADir is the state of swtpm's local certificate authority, which
// signs the TPM's EK and platform certificates: /var/lib/swtpm-localca for
// root (Debian's /etc/swtpm-localca.conf), and for non-root the directory
// swtpm_setup --create-config-files names in the
// $XDG_CONFIG_HOME/swtpm-localca.conf it writes (libvirt's session daemon
// asks for that). virt-controller mounts the backend-storage volume's
// "swtpm-localca" subdirectory here for a persistent TPM.
func (l Layout) SwtpmLocalCADir(root bool) string {
	if root {
		return filepath.Join(systemLibDir, "swtpm-localca")
	}
	return filepath.Join(l.PrivateDir, "var", "lib", "swtpm-localca")
}

// LibvirtDir is the libvirt daemon's private state (XDG dirs in session mode).
func (l Layout) LibvirtDir() string { return filepath.Join(l.PrivateDir, "libvirt") }

// VifCache is the handler's record of a pod interface before bridging.
func (l Layout) VifCache(podIface string) string {
	return filepath.Join(l.PrivateDir, "vif-cache-"+podIface+".json")
}

// LauncherRestartsOff is the marker by which a launcher tells the pod's
// monitor that its VMI asks for no launcher restarts: the monitor then
// ends the pod when the launcher dies, as KubeVirt's does.
func (l Layout) LauncherRestartsOff() string {
	return filepath.Join(l.PrivateDir, "launcher-restarts-off")
}

// LauncherRestarts is the monitor's record of the launcher restarts it
// made (their count, the last one's time and reason), for people and for
// `vlctl ps`.
func (l Layout) LauncherRestarts() string {
	return filepath.Join(l.PrivateDir, "launcher-restarts.json")
}
