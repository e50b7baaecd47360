package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/capscache"
	"github.com/virtlauncher/virtlauncher/internal/dvimport"
	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

func newRunCmd() *cobra.Command {
	var cfg standalone.Config
	var volumes, publish []string
	var detach bool
	var background string
	cmd := &cobra.Command{
		Use:   "run FILE | run -f FILE [-f FILE...] | run --migrate-from NAME",
		Short: "Boot a VMI manifest on this machine and show its serial console",
		Long: `run plays virt-handler's part on one machine: it lays out a working directory like a
launcher pod, links local disk images where a cluster mounts container disks (a containerDisk
image is an absolute path to a local disk image, or an image reference pulled into
--image-cache; a kernelBoot container image an absolute path to a directory, or an image
reference whose kernelPath and initrdPath are pulled the same way), builds the pod network in
namespaces of its own, starts
virt-launcher-monitor and virt-launcher as an unprivileged user, syncs the VMI and prints the
guest's serial console on stdout.

Storage that keeps data: a hostDisk is used at the path it names (type Disk: an existing
file; DiskOrCreate: created there, sparse, with its capacity, when missing) and kept, but
only below a directory allowed with --allow-host-path DIR (as docker needs -v: a manifest
alone cannot give the guest a file of the host) and only a regular file of root's or of the
user running vlctl with sudo; a persistentVolumeClaim needs --volume CLAIM=PATH, a raw
image file (created on first use with size=SIZE) or a block device. A VirtualMachine's
dataVolumeTemplate is filled on first use from its source as CDI imports it (http, registry,
pvc, blank), into the --volume file given for it or, without one, into --volume-store.
vlctl grants QEMU's user access with an ACL entry for the run and never copies, chowns or
deletes these files.

--publish [HOSTIP:]HOSTPORT:GUESTPORT forwards a TCP port of the host (127.0.0.1 unless
HOSTIP is given) to the guest, like podman run -p; nothing is published unless asked.
The guest's DNS queries are relayed to the host's resolvers, and its TCP connections to
what the host reaches, through relays in vlctl connecting as the VM's own uid (never to the
host's own addresses, loopback, link-local or cloud metadata endpoints; at most 256 at once):
no route, firewall rule or sysctl of the host changes. --no-egress keeps it to DNS.

The manifest may come in several files (FILE and -f FILE, repeatable), each with several
documents separated by --- as kubectl apply -f takes them: exactly one VirtualMachine or
VirtualMachineInstance, and the ConfigMaps and Secrets its configMap, secret and sysprep volumes
and cloud-init secretRefs name (Secret data in base64, stringData as text), written where a pod
mounts them.

A VirtualMachine's spec.instancetype and spec.preference are expanded as KubeVirt's API
server and VM controller do (instancetype.kubevirt.io/v1beta1): the instancetype gives CPU,
memory and what else it sets (a VM setting the same is refused, naming the field), the
preference fills in what the VM leaves unset. They are looked up among the documents, then in
--instancetypes DIR, then among KubeVirt's common cluster instancetypes and preferences that
vlctl ships (u1.medium, o1, cx1, m1, n1; fedora, ubuntu, centos.stream9, rhel.9, windows.11,
alpine, cirros, ...).

A VirtualMachine's run strategy is honoured: Always starts the guest again whenever it stops,
RerunOnFailure when it fails, Once and Manual run it once; Halted (running: false) is refused
unless --force-start.

On a terminal, what you type goes to the guest's serial console, Ctrl-C included, until ^]
detaches the keys; vlctl console NAME types again from any terminal.

It returns when the guest powers off (status 0). Ctrl-C (or SIGTERM) shuts the guest down
with ACPI, destroys it when the grace period ends (at once on a second Ctrl-C), and removes
everything run created.

-d runs the VM in the background: vlctl returns once the guest runs, printing NAMESPACE/NAME
(until then its progress lines and errors come on stderr as in the foreground, and Ctrl-C stops
it). A supervisor, vlctl itself in a session of its own, holds the VM: neither the end of this
vlctl nor the terminal closing reaches it. vlctl console NAME attaches to its console, vlctl
logs --run NAME shows the supervisor's output, kept after the run ends until vlctl rm NAME.

While it runs, vlctl ps lists the VM and vlctl stop|kill|pause|unpause|console NAME drive it
from any terminal (stop is Ctrl-C, kill a second Ctrl-C; SIGUSR1 to vlctl run does the same).

--migrate-from NAME takes over the guest of a running VM by live migration, as KubeVirt moves
a VM to another node: this run builds a pod of its own (work dir, user id, pod network),
starts its launcher as the migration's target and asks NAME's vlctl run to migrate the guest
there (memory and the pod's disks are copied; the guest keeps running, its MAC and its
address inside the pod). When the migration completes this run goes on as the VM's run and
the old one ends with status 0; its published ports move here once it has let them go (a
moment without them). When the migration fails, or this run is interrupted meanwhile (which
cancels it), the guest runs on where it was and this run ends with the reason. Storage of
the host (--volume claims, hostDisk) is the same file for both runs: shared, never copied.
A VirtualMachine's run strategy moves with the guest (the old run never starts it again).
Not carried over yet: volumes and interfaces plugged in while it ran, bridge binding and
secondary networks (each refused, saying so).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cfg.MigrateFrom != "" {
				if len(args) != 0 || len(cfg.Files) > 0 {
					return errors.New("--migrate-from takes the VM's manifest from its run: give no FILE")
				}
				return nil
			}
			if len(cfg.Files) > 0 {
				return cobra.MaximumNArgs(1)(cmd, args)
			}
			if len(args) != 1 {
				return fmt.Errorf("give the manifest: FILE or -f FILE (repeatable), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				cfg.File = args[0]
			}
			if cfg.MigrateFrom != "" && cfg.Instancetypes != "" {
				return errors.New("--migrate-from: the VM keeps its run's expanded instancetype; --instancetypes does not apply")
			}
			if cfg.MigrateFrom != "" && (len(volumes) > 0 || len(publish) > 0 || cfg.ForceStart || cmd.Flags().Changed("binding")) {
				return errors.New("--migrate-from: the VM keeps its run's storage, network and run strategy; --volume, --publish, --binding and --force-start do not apply")
			}
			for _, v := range volumes {
				m, err := userstorage.ParseVolumeFlag(v)
				if err != nil {
					return err
				}
				cfg.Volumes = append(cfg.Volumes, m)
			}
			// Besides root's, a hostDisk may use the files of whoever ran
			// vlctl with sudo.
			if id, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil && id > 0 {
				cfg.HostPathOwner = id
			}
			for _, d := range cfg.DNS {
				if _, err := netip.ParseAddrPort(d); err != nil {
					return fmt.Errorf("--dns %q: want IP:PORT of a resolver: %w", d, err)
				}
			}
			for _, p := range publish {
				pb, err := guestnet.ParsePublish(p)
				if err != nil {
					return err
				}
				cfg.Publish = append(cfg.Publish, pb)
			}
			if background == "" {
				// The supervisor's standard input is that file already.
				if err := stdinManifest(runFiles(cfg.File, cfg.Files)); err != nil {
					return err
				}
			}
			if detach && background == "" {
				return runDetached(cmd, cfg)
			}
			ctx, stop := stopSignals(&cfg)
			defer stop()
			if background != "" {
				return supervise(ctx, cfg, background)
			}
			cfg.Console = cmd.OutOrStdout()
			cfg.Status = cmd.ErrOrStderr()
			var restore func()
			cfg.Input, restore = guestKeys(cmd.InOrStdin(), cfg.Status)
			defer restore()
			return runError(standalone.Run(ctx, cfg))
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&detach, "detach", "d", false, "run in the background: return once the guest runs, printing the VM's name; a supervisor of its own holds the VM (vlctl stop NAME ends it, vlctl logs --run NAME shows its output, vlctl rm NAME removes what it leaves)")
	f.StringVar(&background, "background", "", "the directory of the background run this vlctl supervises (set by vlctl run -d)")
	f.MarkHidden("background")
	f.StringArrayVarP(&cfg.Files, "filename", "f", nil, "a file of manifests, YAML documents separated by --- (repeatable, as kubectl apply -f; - for the standard input): one VirtualMachine or VirtualMachineInstance among them, and the ConfigMaps and Secrets its volumes name")
	f.StringVar(&cfg.Instancetypes, "instancetypes", "", "DIR: .yaml/.yml/.json files of instancetypes and preferences (instancetype.kubevirt.io/v1beta1) a VM may name; searched after the -f documents, before vlctl's common ones (u1, o1, cx1, m1, n1; fedora, ubuntu, windows.11, ...)")
	f.BoolVar(&cfg.Quiet, "quiet", false, "leave out the progress lines (what is being done, where the guest is reachable); warnings and errors are still printed")
	f.StringArrayVar(&cfg.DNS, "dns", nil, "HOST:PORT of a resolver the guest's DNS queries are relayed to (repeatable; default: the host's, from /etc/resolv.conf)")
	f.BoolVar(&cfg.NoEgress, "no-egress", false, "no TCP connections from the guest to the outside world (DNS is still relayed)")
	f.StringArrayVar(&publish, "publish", nil, "[HOSTIP:]HOSTPORT:GUESTPORT[/tcp]: forward a TCP port of the host (127.0.0.1 unless HOSTIP) to the guest (repeatable)")
	f.StringArrayVar(&volumes, "volume", nil, "CLAIM=PATH[,size=SIZE]: the local storage (raw image file or block device) of a persistentVolumeClaim or dataVolume; a missing file is created with SIZE or the dataVolumeTemplate's request (repeatable)")
	f.StringArrayVar(&cfg.AllowHostPaths, "allow-host-path", nil, "DIR: a manifest's hostDisk may use or create files below DIR (resolved; links may not lead out of it); elsewhere it is refused (repeatable)")
	f.BoolVar(&cfg.ForceStart, "force-start", false, "run a VirtualMachine whose run strategy keeps it stopped (Halted, running: false)")
	f.Var(cpuSetFlag{&cfg.CPUSet}, "cpuset", "LIST: host CPUs for the VM's pod, as a CPU manager gives them (e.g. 2-3 or 2,5): a VMI with dedicatedCpuPlacement needs it; its vCPUs (and an isolated emulator thread) are pinned there")
	f.Var(deviceFlag{&cfg.Devices}, "device", "NAME=DDDD:BB:SS.F: the host PCI device (bound to vfio-pci, on a host with an IOMMU) for the VMI's GPU or host device NAME, as its device plugin would give it (repeatable; several for one resource are handed out in order)")
	f.BoolVar(&cfg.Emulation, "emulation", false, "force software emulation (TCG); without it KVM is used when /dev/kvm opens")
	f.StringVar(&cfg.Binding, "binding", vmi.BindingMasquerade, "binding of the auto-attached pod interface: masquerade or bridge (KubeVirt's cluster default)")
	f.StringVar(&cfg.WorkRoot, "workdir", standalone.DefaultWorkRoot, "parent of the per-run working directory")
	f.StringVar(&cfg.RecordDir, "record-dir", runrecord.DefaultDir, "where the run records itself for vlctl ps and the verbs by name (root's alone, 0700, made when missing; the records hold the VMI)")
	f.StringVar(&cfg.ImageCache, "image-cache", registrydisk.DefaultDir, "where containerDisk images given by reference (e.g. quay.io/containerdisks/fedora:latest) are pulled to (root's)")
	f.StringVar(&cfg.VolumeStore, "volume-store", userstorage.DefaultVolumeStore, "where a VirtualMachine's dataVolumeTemplates that no --volume maps are kept, as NAMESPACE/VM/DATAVOLUME.img (root's; kept until you remove them)")
	f.StringVar(&cfg.ImportCache, "import-cache", dvimport.DefaultCacheDir, "where images a DataVolume's http source names are downloaded to and kept, by URL (root's alone)")
	f.BoolVar(&cfg.Keep, "keep", false, "keep the working directory (logs, overlays) after the run")
	f.StringVar(&cfg.UIDs, "uids", uidpool.DefaultRange, "FIRST-LAST: the ids each VM takes one of, as its own user and group, for its launcher, libvirt daemon and QEMU (no account may use them)")
	f.StringVar(&cfg.BinDir, "bin-dir", "", "directory of virt-launcher-monitor and virt-launcher (default: vlctl's own)")
	f.StringVar(&cfg.CapsCache, "qemu-caps-cache", capscache.DefaultDir, "root's directory of libvirt's QEMU capability probe, made by vlctl and read by every VM's launcher; none: off")
	f.DurationVar(&cfg.QemuTimeout, "qemu-timeout", standalone.DefaultQemuTimeout, "how long the launcher waits for its domain")
	f.StringVar(&cfg.MigrateFrom, "migrate-from", "", "NAME or NAMESPACE/NAME of a running VM (vlctl ps) whose guest this run takes over by live migration, instead of booting FILE")
	f.StringVar(&cfg.MigrationBandwidth, "migration-bandwidth", "", "with --migrate-from: cap the migration's bandwidth (bytes per second, such as 64Mi; default: no cap)")
	return cmd
}

// guestKeys makes the terminal in, when it is one, the guest's keyboard:
// raw, so that the keys go to the guest's console (Ctrl-C too) until ^]
// detaches them (the terminal is restored then, and by restore, which the
// run calls at its end). input is nil when in is not a terminal.
func guestKeys(in io.Reader, status io.Writer) (input io.Reader, restore func()) {
	f, ok := in.(*os.File)
	if !ok {
		return nil, func() {}
	}
	raw, err := rawTerminal(int(f.Fd()), true)
	if err != nil {
		return nil, func() {}
	}
	var once sync.Once
	restore = func() { once.Do(raw) }
	fmt.Fprint(status, "vlctl: keys go to the guest's console (Ctrl-C too); ^] detaches them\n")
	return &escapeReader{r: f, onEscape: func() {
		restore()
		fmt.Fprint(status, "\nvlctl: keys detached from the guest; Ctrl-C stops the VM, vlctl console NAME types again\n")
	}}, restore
}

// stopSignals makes the context of a run: the first interrupt (SIGINT,
// SIGTERM: vlctl stop NAME) stops the guest gracefully, the second (or
// vlctl kill NAME) at once, through cfg.Force.
func stopSignals(cfg *standalone.Config) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	force := make(chan struct{})
	cfg.Force = force
	sigs, kill := make(chan os.Signal, 2), make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	signal.Notify(kill, killSignal)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-kill:
			cancel()
			close(force)
			return
		}
		select {
		case <-sigs:
		case <-kill:
		}
		close(force)
	}()
	return ctx, func() {
		signal.Stop(sigs)
		signal.Stop(kill)
		cancel()
	}
}

// runError is how a run's error is told: a manifest problem in one line
// naming the fields.
func runError(err error) error {
	if me := (*standalone.ManifestError)(nil); errors.As(err, &me) {
		return oneLine(err)
	}
	return err
}

// escapeReader reads r until the escape byte (^]), then calls onEscape
// once and reports the end of input from then on.
type escapeReader struct {
	r        io.Reader
	onEscape func()
	done     bool
}

func (e *escapeReader) Read(p []byte) (int, error) {
	if e.done {
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	if i := bytes.IndexByte(p[:n], escapeByte); i >= 0 {
		e.done = true
		e.onEscape()
		if i == 0 {
			return 0, io.EOF
		}
		return i, nil
	}
	return n, err
}

// deviceFlag is --device NAME=PCI-ADDRESS, repeatable.
type deviceFlag struct{ devs *[]standalone.Device }

func (f deviceFlag) String() string {
	if f.devs == nil {
		return ""
	}
	var out []string
	for _, d := range *f.devs {
		out = append(out, d.Name+"="+d.Addr)
	}
	return strings.Join(out, ",")
}

func (f deviceFlag) Set(s string) error {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" || addr == "" {
		return fmt.Errorf("%q is not NAME=DDDD:BB:SS.F", s)
	}
	*f.devs = append(*f.devs, standalone.Device{Name: name, Addr: addr})
	return nil
}

func (deviceFlag) Type() string { return "NAME=ADDRESS" }

// cpuSetFlag is --cpuset: a CPU list in the kernel's format.
type cpuSetFlag struct{ cpus *[]uint }

func (f cpuSetFlag) String() string {
	if f.cpus == nil {
		return ""
	}
	return hostcpu.FormatList(*f.cpus)
}

func (f cpuSetFlag) Set(s string) error {
	cpus, err := hostcpu.ParseList(s)
	if err != nil {
		return err
	}
	if len(cpus) == 0 {
		return fmt.Errorf("no CPUs")
	}
	*f.cpus = cpus
	return nil
}

func (cpuSetFlag) Type() string { return "LIST" }
