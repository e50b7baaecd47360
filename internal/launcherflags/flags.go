// Package launcherflags is virt-launcher's command line: the flags
// KubeVirt's pod template passes, with KubeVirt's defaults (Parse), plus
// our own, and the one renderer of them (Args), with which vlctl run, the
// test harness and the bench start their launchers.
package launcherflags

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
	v1 "kubevirt.io/api/core/v1"
)

// Options are virt-launcher's command-line flags: every flag KubeVirt's pod
// template passes (kubevirt-wire.md 5.3) with KubeVirt's defaults, plus
// --force-emulation, --private-dir, --libvirt-run-dir and --hooks-dir of our
// own.
type Options struct {
	QemuTimeout        time.Duration
	Name, UID          string
	Namespace          string
	ShareDir           string
	EphemeralDiskDir   string
	ContainerDiskDir   string
	HotplugDiskDir     string
	PrivateDir         string
	LibvirtRunDir      string
	HooksDir           string
	BlockDeviceDir     string
	ImageVolumeDir     string
	KernelBootVolDir   string
	QemuCapsCache      string
	ResolvConf         string
	Virtlogd           bool
	GracePeriodSeconds int
	HookSidecars       uint
	OVMFPath           string
	DiskMemoryLimit    int64
	Hypervisor         string
	RunAsNonroot       bool
	ImageVolume        bool
	AllowEmulation     bool
	ForceEmulation     bool
	SimulateCrash      bool
	LibvirtLogFilters  string
	Verbosity          int

	// UpgradeOrdinalIfaces is KubeVirt's --upgrade-ordinal-ifaces (the
	// PodSecondaryInterfaceNamingUpgrade gate): with
	// LibvirtHookServerAndClient the pre-migration hook renames an
	// incoming domain's ordinal taps (tap1, ...) to the hashed names this
	// pod's network has; without it, it changes nothing, as in KubeVirt.
	// VGPUDedicatedHook (--vgpu-dedicated-hook, the VGPULiveMigration
	// gate; v1.9.0 gives the incoming vGPU the target's mdev UUID) and the
	// flags after it are accepted for compatibility and change nothing.
	UpgradeOrdinalIfaces, VGPUDedicatedHook, VMStatsCollector        bool
	FirmwareAutoSelection, KeepAfterFailure, AllowCrossArchEmulation bool
	AgentSysInterval, AgentFileInterval, AgentUserInterval           time.Duration
	AgentVersionInterval, FSFreezeStatusInterval                     time.Duration
	// LibvirtHookServerAndClient is KubeVirt's
	// --libvirt-hook-server-and-client (a pflag bool, default false),
	// which virt-controller passes with the LibvirtHooksServerAndClient
	// feature gate: alpha (off) in v1.8, Beta and on by default in v1.9.0,
	// which still has the flag. A migration target then runs the
	// pre-migration hook server (internal/premigration) at
	// <share>/migration-hook-socket, which libvirt's qemu hook (the
	// image's /etc/libvirt/hooks/qemu) calls as the migration begins:
	// the incoming domain XML gets the target's dedicated CPUs and, for a
	// migration into another domain namespace, its disk paths. Without
	// it the source places a VMI with dedicated CPUs on the target's CPUs
	// (status.migrationState.targetCPUSet), as KubeVirt's source does.
	LibvirtHookServerAndClient bool
}

// Layout derives every path from the directory flags.
func (o *Options) Layout() layout.Layout {
	return layout.Layout{
		ShareDir:         o.ShareDir,
		PrivateDir:       o.PrivateDir,
		EphemeralDiskDir: o.EphemeralDiskDir,
		ContainerDiskDir: o.ContainerDiskDir,
		HotplugDiskDir:   strings.TrimSuffix(o.HotplugDiskDir, "/"),
		LibvirtRunDir:    o.LibvirtRunDir,
		HooksDir:         o.HooksDir,
		BlockDeviceDir:   o.BlockDeviceDir,

		ImageVolumeDir:      o.ImageVolumeDir,
		KernelBootVolumeDir: o.KernelBootVolDir,
	}
}

const ignored = " (accepted, ignored)"

// FlagSet returns the flag set filling o with KubeVirt's defaults. Both
// -flag and --flag spellings work.
func (o *Options) FlagSet(out io.Writer) *flag.FlagSet {
	d := layout.Default()
	fs := flag.NewFlagSet("virt-launcher", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&o.QemuTimeout, "qemu-timeout", 3*time.Minute, "how long to wait for the domain to be defined before exiting with an error")
	fs.StringVar(&o.Name, "name", "", "name of the VirtualMachineInstance")
	fs.StringVar(&o.UID, "uid", "", "UID of the VirtualMachineInstance")
	fs.StringVar(&o.Namespace, "namespace", "", "namespace of the VirtualMachineInstance")
	fs.StringVar(&o.ShareDir, "kubevirt-share-dir", d.ShareDir, "directory shared with virt-handler (sockets, notify pipe)")
	fs.StringVar(&o.EphemeralDiskDir, "ephemeral-disk-dir", d.EphemeralDiskDir, "base directory for ephemeral disk data (overlays, cloud-init ISOs)")
	fs.StringVar(&o.ContainerDiskDir, "container-disk-dir", d.ContainerDiskDir, "directory holding the container disks disk_<N>.img and kernel-boot/")
	fs.StringVar(&o.HotplugDiskDir, "hotplug-disk-dir", d.HotplugDiskDir+"/", "directory holding hotplugged disks")
	fs.StringVar(&o.PrivateDir, "private-dir", d.PrivateDir, "launcher-private directory (libvirt state, console sockets, config disks); ours, not KubeVirt's")
	fs.StringVar(&o.LibvirtRunDir, "libvirt-run-dir", d.LibvirtRunDir, "libvirt runtime directory (daemon sockets, empty disks); ours, not KubeVirt's")
	fs.StringVar(&o.ImageVolumeDir, "image-volume-dir", d.ImageVolumeDir, "with --image-volume, where container disk N's image is mounted (as disk_N); ours, not KubeVirt's")
	fs.StringVar(&o.KernelBootVolDir, "kernel-boot-volume-dir", d.KernelBootVolumeDir, "with --image-volume, where the kernelBoot container's image is mounted; ours, not KubeVirt's")
	fs.BoolVar(&o.Virtlogd, "virtlogd", false, "run virtlogd beside the libvirt daemon: QEMU's log and the serial console log go through it, capped at 1 MiB with one backup (off: QEMU writes them itself, the launcher caps the serial log at 1 MiB with one backup, and the pod saves ~18 MiB); ours, not KubeVirt's")
	fs.StringVar(&o.ResolvConf, "resolv-conf", "/etc/resolv.conf", "the pod's resolver configuration, whose servers and search domains the DHCP server hands to the guest; ours, not KubeVirt's")
	fs.StringVar(&o.QemuCapsCache, "qemu-caps-cache", "", "directory of libvirt QEMU capability cache files shared by the launchers of a machine, so only the first pays for the probe (~2.5 s under TCG); empty: none; ours, not KubeVirt's")
	fs.IntVar(&o.GracePeriodSeconds, "grace-period-seconds", int(vmi.DefaultGracePeriodSeconds), "after SIGTERM, seconds to wait for the guest to power off before destroying it")
	fs.UintVar(&o.HookSidecars, "hook-sidecars", 0, "number of hook sidecars to wait for (up to --qemu-timeout) before starting; their sockets are in --hooks-dir")
	fs.StringVar(&o.BlockDeviceDir, "block-device-dir", d.BlockDeviceDir, "directory holding block PVCs' device nodes, one per volume name; ours, not KubeVirt's")
	fs.StringVar(&o.HooksDir, "hooks-dir", d.HooksDir, "directory holding one directory per hook sidecar, each with its gRPC socket; ours, not KubeVirt's")
	fs.StringVar(&o.OVMFPath, "ovmf-path", "/usr/share/edk2/ovmf", "directory with the EFI firmware (falls back to /usr/share/OVMF)")
	fs.Int64Var(&o.DiskMemoryLimit, "disk-memory-limit", 2097152000, "memory limit in bytes of the qemu-img image probe")
	fs.StringVar(&o.Hypervisor, "hypervisor", "kvm", "hypervisor (only kvm, with TCG emulation as the fallback)")
	fs.BoolVar(&o.RunAsNonroot, "run-as-nonroot", false, "the pod runs as non-root (non-root mode is chosen from the effective uid)")
	fs.BoolVar(&o.AllowEmulation, "allow-emulation", false, "use software emulation (TCG) when KVM is not available")
	fs.BoolVar(&o.ForceEmulation, "force-emulation", false, "always use software emulation (TCG), even when KVM is available; ours, not KubeVirt's")
	fs.BoolVar(&o.SimulateCrash, "simulate-crash", false, "exit with a fatal error at start-up (testing)")
	fs.StringVar(&o.LibvirtLogFilters, "libvirt-log-filters", "", "libvirt log_filters for the daemon")
	fs.IntVar(&o.Verbosity, "v", 2, "log verbosity (VIRT_LAUNCHER_LOG_VERBOSITY overrides it)")

	fs.BoolVar(&o.ImageVolume, "image-volume", false, "container disks and the kernelBoot image are Kubernetes image volumes (KubeVirt's ImageVolume feature gate): at Sync, link disk_N.img and kernel-boot/ in --container-disk-dir to their files")
	fs.BoolVar(&o.UpgradeOrdinalIfaces, "upgrade-ordinal-ifaces", false, "with --libvirt-hook-server-and-client, a migration target renames the incoming domain's ordinal taps (tap1, ...) to hashed ones")
	fs.BoolVar(&o.VGPUDedicatedHook, "vgpu-dedicated-hook", false, "give an incoming vGPU the target's mdev UUID (KubeVirt's VGPULiveMigration gate)"+ignored)
	fs.BoolVar(&o.VMStatsCollector, "vm-stats-collector", false, "GetVMStats answers (KubeVirt's VMStatsCollector feature gate); without it, KubeVirt's error")
	fs.BoolVar(&o.FirmwareAutoSelection, "firmware-auto-selection", false, "let libvirt pick the firmware"+ignored)
	fs.BoolVar(&o.KeepAfterFailure, "keep-after-failure", false, "monitor flag"+ignored)
	fs.BoolVar(&o.AllowCrossArchEmulation, "allow-cross-arch-emulation", false, "allow emulating another architecture"+ignored)
	fs.BoolVar(&o.LibvirtHookServerAndClient, "libvirt-hook-server-and-client", false, "run the pre-migration hook server on a migration target (KubeVirt's LibvirtHooksServerAndClient feature gate)")
	fs.DurationVar(&o.AgentSysInterval, "qemu-agent-sys-interval", 120*time.Second, "guest agent poll period of interfaces, OS, host name and time zone")
	fs.DurationVar(&o.AgentFileInterval, "qemu-agent-file-interval", 300*time.Second, "guest agent poll period of the file systems")
	fs.DurationVar(&o.AgentUserInterval, "qemu-agent-user-interval", 10*time.Second, "guest agent poll period of the logged-in users")
	fs.DurationVar(&o.AgentVersionInterval, "qemu-agent-version-interval", 300*time.Second, "guest agent poll period of its version and commands")
	fs.DurationVar(&o.FSFreezeStatusInterval, "qemu-fsfreeze-status-interval", 5*time.Second, "guest agent poll period of the file-system freeze state")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: virt-launcher [flags]\n\n"+
			"Runs one VirtualMachineInstance through a private libvirt daemon, driven over\n"+
			"KubeVirt's command protocol on <kubevirt-share-dir>/sockets/launcher-sock.\n"+
			"Environment: STANDALONE_VMI (a VMI as YAML or JSON, synced at start-up),\n"+
			"VIRT_LAUNCHER_LOG_VERBOSITY (overrides -v), LIBVIRT_DEBUG_LOGS=1.\n"+
			"Exit status: 0 normal end, 1 QEMU ended abnormally, 2 fatal start-up error.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses virt-launcher's arguments (without the program name).
func Parse(args []string, out io.Writer) (*Options, error) {
	o := &Options{}
	fs := o.FlagSet(out)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.GracePeriodSeconds < 0 {
		return nil, fmt.Errorf("--grace-period-seconds %d: must not be negative", o.GracePeriodSeconds)
	}
	if o.QemuTimeout <= 0 {
		return nil, fmt.Errorf("--qemu-timeout %v: must be positive", o.QemuTimeout)
	}
	if o.Hypervisor != "kvm" && o.Hypervisor != "" {
		return nil, fmt.Errorf("--hypervisor %q: only kvm is supported", o.Hypervisor)
	}
	for _, p := range []struct{ flag, v string }{
		{"kubevirt-share-dir", o.ShareDir}, {"ephemeral-disk-dir", o.EphemeralDiskDir},
		{"container-disk-dir", o.ContainerDiskDir}, {"hotplug-disk-dir", o.HotplugDiskDir},
		{"private-dir", o.PrivateDir}, {"libvirt-run-dir", o.LibvirtRunDir}, {"qemu-caps-cache", o.QemuCapsCache},
		{"hooks-dir", o.HooksDir}, {"block-device-dir", o.BlockDeviceDir},
		{"hooks-dir", o.HooksDir},
		{"image-volume-dir", o.ImageVolumeDir}, {"kernel-boot-volume-dir", o.KernelBootVolDir},
	} {
		if p.flag == "qemu-caps-cache" && p.v == "" {
			continue
		}
		if !strings.HasPrefix(p.v, "/") {
			return nil, fmt.Errorf("--%s %q: must be an absolute path", p.flag, p.v)
		}
	}
	return o, nil
}

// Args renders o as the command line Parse reads back into o: every flag
// whose value differs from its default, as --name=value (the form the
// flag package and the monitor's own reader both take for every kind of
// flag), in the flag set's order. It is the one place a launcher's (and
// its monitor's) command line is assembled.
func (o *Options) Args() []string {
	var cur Options
	fs := cur.FlagSet(io.Discard) // cur now holds the defaults
	defaults := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { defaults[f.Name] = f.Value.String() })
	// The flag values point into cur: reading them now reads o's.
	cur = *o
	var args []string
	fs.VisitAll(func(f *flag.Flag) {
		if v := f.Value.String(); v != defaults[f.Name] {
			args = append(args, "--"+f.Name+"="+v)
		}
	})
	return args
}

// Defaults are the options of a command line without flags.
func Defaults() Options {
	var o Options
	o.FlagSet(io.Discard)
	return o
}

// SetLayout points every directory flag at l's directories: the inverse
// of Layout.
func (o *Options) SetLayout(l layout.Layout) {
	o.ShareDir = l.ShareDir
	o.PrivateDir = l.PrivateDir
	o.EphemeralDiskDir = l.EphemeralDiskDir
	o.ContainerDiskDir = l.ContainerDiskDir
	o.HotplugDiskDir = l.HotplugDiskDir
	o.LibvirtRunDir = l.LibvirtRunDir
	o.HooksDir = l.HooksDir
	o.BlockDeviceDir = l.BlockDeviceDir
	o.ImageVolumeDir = l.ImageVolumeDir
	o.KernelBootVolDir = l.KernelBootVolumeDir
}

// ForVMI are the defaults with what virt-controller's pod template derives
// from the VMI: its name, namespace and UID, and the grace period, which
// is the VMI's own plus 15 s (the launcher's destroy must come before the
// kubelet's SIGKILL, which waits the pod's grace period).
func ForVMI(v *v1.VirtualMachineInstance) Options {
	o := Defaults()
	o.Name, o.Namespace, o.UID = v.Name, v.Namespace, string(v.UID)
	o.GracePeriodSeconds = int(vmi.GracePeriodSeconds(v) + 15)
	return o
}
