package standalone

import (
	"io"
	"log/slog"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// Config is the options of one `vlctl run`, as its user gives them (vlctl
// run's flags), grouped by the part of the run that reads them, so that a
// part can be handed its group alone. Run gives a field left zero the
// default the flag has (DefaultWorkRoot, DefaultQemuTimeout,
// userstorage.DefaultVolumeStore, capscache.DefaultDir,
// uidpool.DefaultRange, ...). What Run works out from them is the
// session's, not the Config's.
type Config struct {
	ManifestOptions
	StorageOptions
	NetworkOptions
	HardwareOptions
	HostOptions
	MigrationOptions
	TerminalOptions
	ReportOptions
}

// ManifestOptions are what to run: the documents, loaded and expanded
// before anything is made (loadManifest), and whether their run strategy
// is honoured.
type ManifestOptions struct {
	// File is the VMI (or VM) manifest; Files are more files of documents
	// (-f). Together they hold exactly one VirtualMachine or
	// VirtualMachineInstance and the ConfigMaps and Secrets its volumes
	// name (internal/manifest).
	File  string
	Files []string
	// Instancetypes is a directory of instancetypes and preferences
	// (--instancetypes), searched after the documents and before the
	// common ones shipped with vlctl (internal/instancetype).
	Instancetypes string
	// Binding of the auto-attached pod interface (masquerade by default),
	// given to the VMI as it is defaulted.
	Binding string
	// ForceStart runs a VM whose run strategy keeps it stopped (Halted,
	// running: false).
	ForceStart bool
}

// StorageOptions are where the guest's disks come from and go: the user's
// files for its claims, the host paths it may use and the caches and
// store of what vlctl fetches or makes for it (userstorage, registrydisk).
type StorageOptions struct {
	// Volumes map the manifest's persistentVolumeClaims and dataVolumes to
	// local files or block devices (--volume).
	Volumes []userstorage.VolumeMap
	// AllowHostPaths are the directories a manifest's hostDisk may be
	// below (--allow-host-path); one elsewhere is refused (userstorage).
	AllowHostPaths []string
	// HostPathOwner is, besides root, the user whose files a hostDisk may
	// use (vlctl: SUDO_UID); 0 for root's alone.
	HostPathOwner int
	// ImageCache is where containerDisk images named by reference (not by
	// a local path) are pulled to (default registrydisk.DefaultDir).
	ImageCache string
	// VolumeStore keeps a VM's DataVolumes that no --volume maps (default
	// userstorage.DefaultVolumeStore), ImportCache the images downloaded
	// for them (default dvimport.DefaultCacheDir).
	VolumeStore, ImportCache string
}

// NetworkOptions are the guest's network services beside its pod network
// (guestnet.Services): published ports, DNS and the way out.
type NetworkOptions struct {
	// Publish forwards host TCP ports to the guest (--publish).
	Publish []guestnet.Publish
	// DNS are the resolvers (host:port) the guest's DNS queries are relayed
	// to; empty means the host's (/etc/resolv.conf).
	DNS []string
	// NoEgress leaves the guest without a way out beyond DNS
	// (--no-egress; guestnet.Services).
	NoEgress bool
}

// HardwareOptions are the host's hardware the VM is given: KVM or not, its
// CPUs and its PCI devices.
type HardwareOptions struct {
	// Emulation forces TCG. Without it KVM is used when /dev/kvm works and
	// emulation otherwise.
	Emulation bool
	// CPUSet are the host CPUs the VM's pod may use (--cpuset): its
	// dedicated CPUs, given as a CPU manager gives them, through a cpuset
	// cgroup of the pod's own.
	CPUSet []uint
	// Devices are the host PCI devices for the VMI's GPUs and host
	// devices (--device), bound to vfio-pci.
	Devices []Device
}

// HostOptions are where on this machine a run makes its pod and as whom:
// the working directory, the VM's ids, the launcher's binaries and
// capability cache, the run's record.
type HostOptions struct {
	// WorkRoot holds one working directory per run (default /run/vl: short,
	// because unix socket paths are limited to 107 bytes).
	WorkRoot string
	// Keep leaves the working directory in place for inspection.
	Keep bool
	// UIDs is the range "FIRST-LAST" of the ids each run takes one of for
	// its monitor, launcher, libvirt daemon and QEMU: a uid and gid of
	// the VM's own (default uidpool.DefaultRange; see uidpool).
	UIDs string
	// BinDir holds virt-launcher-monitor and virt-launcher (default: the
	// directory of the running executable).
	BinDir string
	// QemuTimeout is passed to the launcher.
	QemuTimeout time.Duration
	// CapsCache is a directory, root's and read-only to the VMs, where
	// the launchers of this machine find libvirt's QEMU capability probe
	// (~2.5 s under TCG when cold), made by vlctl in a daemon of its own
	// (internal/capscache). Default capscache.DefaultDir; "none"
	// turns it off.
	CapsCache string
	// RecordDir is where the run records itself for `vlctl ps` and the
	// verbs by name (default runrecord.DefaultDir): a directory only root
	// can write.
	RecordDir string
}

// MigrationOptions take the guest over from another run instead of
// booting it (guest.go, migrate.go).
type MigrationOptions struct {
	// MigrateFrom names a running VM (NAME or NAMESPACE/NAME, as vlctl ps
	// lists it) whose guest this run takes over by live migration instead
	// of booting one from File (--migrate-from; migrate.go).
	MigrateFrom string
	// MigrationBandwidth caps that migration (bytes per second, a quantity
	// such as 64Mi); "" for no cap, KubeVirt's default.
	MigrationBandwidth string
}

// TerminalOptions are vlctl run's own terminal: the guest's serial console
// in and out, and the second Ctrl-C.
type TerminalOptions struct {
	// Console receives the guest's serial console.
	Console io.Writer
	// Input, when set, is typed into the guest's serial console (vlctl
	// run's own terminal, in raw mode): it holds the console's input while
	// no `vlctl console` attached before it, and its end of input (^])
	// detaches it for good.
	Input io.Reader
	// Force, when closed, turns a graceful stop in progress into an
	// immediate one (a second Ctrl-C): the guest is destroyed and the
	// launcher killed.
	Force <-chan struct{}
}

// ReportOptions are where the run tells what it does.
type ReportOptions struct {
	// Status receives vlctl's own messages (where ports are forwarded, how
	// the run ended).
	Status io.Writer
	// Quiet leaves out the progress lines (what is being done, where the
	// guest is reachable); warnings and errors are still written.
	Quiet bool
	// Log receives vlctl's own structured log (requests on the control
	// socket, the monitor's start, the capability cache); discarded when
	// nil.
	Log *slog.Logger
	// Started, when set, is called once the guest's domain runs, with where
	// things are; tests use it to reach the guest from the outside.
	Started func(Started)
}
