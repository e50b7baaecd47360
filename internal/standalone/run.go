// Package standalone plays virt-handler's part on one machine for `vlctl run`:
// it prepares a working directory laid out like a launcher pod, links local
// disk images where a cluster would mount container disks, sets up the pod
// network in namespaces of its own, starts the monitor and launcher as an
// unprivileged user, syncs the VMI, streams the serial console and cleans all
// of it up at the end.
package standalone

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/kvm"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
	"github.com/vishvananda/netns"
)

// Config is one `vlctl run`.
type Config struct {
	// File is the VMI (or VM) manifest.
	File string
	// Emulation forces TCG. Without it KVM is used when /dev/kvm works and
	// emulation otherwise.
	Emulation bool
	// Binding of the auto-attached pod interface (masquerade by default).
	Binding string
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
	// (capscache.go). Default DefaultCapsCache; "none"
	// turns it off.
	CapsCache string
	// Console receives the guest's serial console; Status receives vlctl's
	// own messages (where ports are forwarded, how the run ended).
	Console, Status io.Writer
	Log             *slog.Logger
	// Volumes map the manifest's persistentVolumeClaims and dataVolumes to
	// local files or block devices (--volume).
	Volumes []VolumeMap
	// ForceStart runs a VM whose run strategy keeps it stopped (Halted,
	// running: false).
	ForceStart bool
	// Force, when closed, turns a graceful stop in progress into an
	// immediate one (a second Ctrl-C): the guest is destroyed and the
	// launcher killed.
	Force <-chan struct{}
	// RecordDir is where the run records itself for `vlctl ps` and the
	// verbs by name (default runrecord.DefaultDir): a directory only root
	// can write.
	RecordDir string
	// Input, when set, is typed into the guest's serial console (vlctl
	// run's own terminal, in raw mode): it holds the console's input while
	// no `vlctl console` attached before it, and its end of input (^])
	// detaches it for good.
	Input io.Reader
	// DNS are the resolvers (host:port) the guest's DNS queries are relayed
	// to; empty means the host's (/etc/resolv.conf).
	DNS []string
	// Quiet leaves out the progress lines (what is being done, where the
	// guest is reachable); warnings and errors are still written.
	Quiet bool
	// Publish forwards host TCP ports to the guest (--publish).
	Publish []Publish
	// NoEgress leaves the guest without a way out beyond DNS
	// (--no-egress; see egress.go).
	NoEgress bool
	// ImageCache is where containerDisk images named by reference (not by
	// a local path) are pulled to (default registrydisk.DefaultDir).
	ImageCache string
	// pulled maps those references to their cached disks (Run fills it).
	pulled map[string]string
	// keys carries Input, read by one goroutine for the whole run.
	keys <-chan []byte
	// Started, when set, is called once the guest's domain runs, with where
	// things are; tests use it to reach the guest from the outside.
	Started func(Started)
}

// Started describes a running `vlctl run`.
type Started struct {
	WorkDir string
	Layout  layout.Layout
	// Socket is the launcher's command socket.
	Socket string
	// OutsideNS is the network namespace playing the outside world (its
	// /run/netns name), PodAddress the pod's address there; empty without a
	// pod network.
	OutsideNS, PodAddress string
}

// errInterrupted ends a run cancelled before the guest was up; everything
// made so far is removed.
var errInterrupted = errors.New("interrupted while starting the guest")

// ManifestError is a manifest that does not load: nothing was started.
type ManifestError struct{ Err error }

func (e *ManifestError) Error() string { return e.Err.Error() }
func (e *ManifestError) Unwrap() error { return e.Err }

// Run boots the VMI and returns when the guest has powered off (nil) or ctx
// is cancelled, in which case the guest is shut down gracefully first. A
// VirtualMachine's run strategy is honoured: Always starts the guest again
// after it stops, RerunOnFailure after it fails, Halted is refused unless
// cfg.ForceStart.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if os.Geteuid() != 0 {
		// Told before anything fails half-way with EPERM on /run/vl.
		return errors.New("vlctl run needs root: it builds network namespaces, grants QEMU access to your disks and runs each VM as a user id of its own; run it with sudo")
	}
	// What runs killed before left (their records say what) goes first.
	if err := GC(cfg.RecordDir, gcWait, cfg.Status); err != nil {
		fmt.Fprintf(cfg.Status, "vlctl: warning: %v\n", err)
	}
	v, err := vmi.LoadFile(cfg.File, vmi.Options{DefaultBinding: cfg.Binding})
	if err != nil {
		return &ManifestError{Err: err}
	}
	vm, err := vmi.LoadVMFile(cfg.File)
	if err != nil {
		return &ManifestError{Err: err}
	}
	policy, err := runPolicy(vm, cfg.ForceStart)
	if err == nil {
		err = runUnsupported(v)
	}
	if err == nil {
		_, err = planStorage(v, vm, cfg.Volumes)
	}
	if err != nil {
		return &ManifestError{Err: fmt.Errorf("%s: %w", cfg.File, err)}
	}
	if w := memoryWarning(v); w != "" {
		fmt.Fprintln(cfg.Status, w)
	}
	if cfg.pulled, err = pullImages(ctx, cfg, v); err != nil {
		return err
	}
	if cfg.Input != nil {
		cfg.keys = pumpKeys(cfg.Input)
	}
	for failures := 0; ; {
		started, err := runOnce(ctx, cfg, v.DeepCopy(), vm)
		if ctx.Err() != nil || !started {
			return err
		}
		if err != nil {
			failures++
		} else {
			failures = 0
		}
		if (err != nil && !policy.afterFailure) || (err == nil && !policy.afterPowerOff) {
			return err
		}
		d := restartDelay(failures)
		if err != nil {
			fmt.Fprintf(cfg.Status, "vlctl: %v\n", err)
		}
		fmt.Fprintf(cfg.Status, "vlctl: run strategy: starting the guest again in %s (Ctrl-C ends)\n", d)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}

// runOnce boots the guest once; started reports whether its domain ran.
func runOnce(ctx context.Context, cfg Config, v *v1.VirtualMachineInstance, vm *v1.VirtualMachine) (started bool, err error) {
	pool, err := uidpool.New(filepath.Join(cfg.RecordDir, "uids"), cfg.UIDs)
	if err != nil {
		return false, fmt.Errorf("--uids: %w", err)
	}
	lease, err := pool.Allocate()
	if err != nil {
		return false, fmt.Errorf("a user id for the VM: %w", err)
	}
	run := &runner{cfg: cfg, vmi: v, vm: vm, owner: leasedIDs(lease), lease: lease, pool: pool, log: cfg.Log}
	defer func() {
		if cerr := run.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		started = run.started
	}()
	if err := run.prepare(); err != nil {
		return false, err
	}
	run.progress("prepared %s", run.workDir)
	// Recorded before the network exists: whatever kills vlctl from here
	// on, vlctl gc finds all the run made outside its work dir.
	if run.netName, err = podnet.NewName(); err != nil {
		return false, err
	}
	if err := run.writeRecord(nil); err != nil {
		return false, err
	}
	if run.caps, err = run.capsCache(ctx); err != nil {
		// Not fatal: the launcher probes QEMU itself, 2.5 s later.
		fmt.Fprintf(cfg.Status, "vlctl: warning: no shared QEMU capability cache: %v\n", err)
	}
	if err := run.setupNetwork(ctx); err != nil {
		return false, err
	}
	if run.net != nil {
		run.progress("pod network up (namespaces %s and %s)", run.net.pod.NSName, run.net.pod.OutsideName)
		run.relayDNS()
	}
	if err := run.publish(); err != nil {
		return false, err
	}
	if err := run.startEgress(); err != nil {
		return false, err
	}
	if err := run.stageLauncher(); err != nil {
		return false, err
	}
	if err := run.handOver(); err != nil {
		return false, err
	}
	if err := run.startMonitor(); err != nil {
		return false, err
	}
	run.progress("launcher starting as %s", run.owner.name)
	return false, run.drive(ctx)
}

func (c *Config) defaults() {
	if c.Binding == "" {
		c.Binding = vmi.BindingMasquerade
	}
	if c.WorkRoot == "" {
		c.WorkRoot = "/run/vl"
	}
	if c.UIDs == "" {
		c.UIDs = uidpool.DefaultRange
	}
	if c.BinDir == "" {
		if exe, err := os.Executable(); err == nil {
			c.BinDir = filepath.Dir(exe)
		}
	}
	if c.RecordDir == "" {
		c.RecordDir = runrecord.DefaultDir
	}
	if c.ImageCache == "" {
		c.ImageCache = registrydisk.DefaultDir
	}
	if c.CapsCache == "" {
		c.CapsCache = DefaultCapsCache
	}
	if c.QemuTimeout == 0 {
		c.QemuTimeout = 5 * time.Minute
	}
	if c.Console == nil {
		c.Console = os.Stdout
	}
	if c.Status == nil {
		c.Status = os.Stderr
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

type ids struct {
	uid, gid int
	name     string // for messages
	// groups are supplementary groups: kvm, for /dev/kvm.
	groups []uint32
}

// leasedIDs is the VM's own user: the leased id as uid and gid, and the
// kvm group when the machine has one (QEMU opens /dev/kvm, 0660
// root:kvm).
func leasedIDs(l *uidpool.Lease) ids {
	o := ids{uid: int(l.ID), gid: int(l.ID), name: fmt.Sprintf("uid %d", l.ID)}
	if g, err := user.LookupGroup("kvm"); err == nil {
		if gid, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
			o.groups = []uint32{uint32(gid)}
		}
	}
	return o
}

// credential runs a process as o.
func (o ids) credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid), Groups: o.groups}
}

func lookupUser(name string) (ids, error) {
	uid, gid, err := LookupUser(name)
	return ids{uid: uid, gid: gid, name: name}, err
}

// LookupUser returns the ids of the unprivileged user that runs launchers,
// their libvirt daemons and QEMU; root is refused.
func LookupUser(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q (runs the launcher and QEMU; scripts/install-deps creates it): %w", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if uid == 0 {
		return 0, 0, fmt.Errorf("user %q is root: launchers run unprivileged", name)
	}
	return uid, gid, nil
}

type runner struct {
	cfg   Config
	vmi   *v1.VirtualMachineInstance
	vm    *v1.VirtualMachine // nil for a VMI manifest
	owner ids
	// lease holds owner's id for the run; cleanup gives it back.
	lease *uidpool.Lease
	pool  *uidpool.Pool
	disks []*userDisk // the user's own storage, open for the run
	// hot are the user's files and devices plugged in while the guest
	// runs (vlctl addvolume), in the VMI as hotplugged volumes.
	hot []*userDisk
	// hotIfaces are the interfaces plugged in while the guest runs (vlctl
	// addinterface), each with its pod interface.
	hotIfaces map[string]string
	// startedAs is what the run recorded once the guest ran; a record
	// written again later (a volume plugged) keeps it.
	startedAs *Started
	started   bool // the guest's domain ran: created disks are kept
	log       *slog.Logger
	workDir   string
	// dir is the work dir, open: root's writes there go through it and
	// never follow a link (safefs). The work dir itself stays root's.
	dir    *safefs.Dir
	layout layout.Layout
	// podDirs are the work dir's entries handed to the launcher's user.
	podDirs []string
	// bins are the monitor and launcher binaries to run, logFile their
	// output, both staged before the hand-over.
	bins    [2]string
	logFile *os.File
	net     *network
	monitor *exec.Cmd
	exited  chan struct{} // closed when the monitor has exited
	record  string        // the run's record file, once written
	pub     *tcpRelay     // the published ports, once listening
	egress  *tcpRelay     // the guest's way out, once listening
	dns     *dnsRelay     // the guest's DNS relay, once listening
	// identity is the VM's passwd and group (identity.go), open until
	// the monitor has started.
	identity *identity
	// caps is the trusted QEMU capability cache the launcher seeds its
	// daemon from (capscache.go), "" for none.
	caps string
	// netName names the pod network's namespaces (podnet.NewName), chosen
	// before they exist so that the record names them for vlctl gc.
	netName string
	exitErr error
}

// prepare makes the working directory and links the user's disks and the
// local images where a cluster would have mounted them. Root alone can
// enter the directory until handOver, and everything is made through its
// descriptor, never following a link.
func (r *runner) prepare() error {
	// The manifest's files are checked before anything is made.
	if _, err := r.localImages(layout.Layout{}); err != nil {
		return err
	}
	if err := r.openDisks(); err != nil {
		return err
	}
	root, err := r.openWorkRoot()
	if err != nil {
		return err
	}
	defer root.Close()
	dir, d, err := makeWorkDir(root)
	if err != nil {
		return err
	}
	r.workDir, r.dir = dir, d
	r.layout = layout.Under(dir)
	l := r.layout
	for _, p := range []string{l.ShareDir, l.SocketsDir(), l.PrivateDir, l.EphemeralDiskDir,
		l.ContainerDiskDir, l.KernelBootDir(), l.HotplugDiskDir, l.LibvirtRunDir, l.BlockDeviceDir} {
		rel, err := r.rel(p)
		if err != nil {
			return err
		}
		if err := r.dir.MkdirAll(rel, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		if top, _, _ := strings.Cut(rel, "/"); !slices.Contains(r.podDirs, top) {
			r.podDirs = append(r.podDirs, top)
		}
	}
	if err := r.linkDisks(); err != nil {
		return err
	}
	links, err := r.localImages(l)
	if err != nil {
		return err
	}
	for _, k := range links {
		rel, err := r.rel(k.dst)
		if err != nil {
			return err
		}
		if err := r.dir.Symlink(k.src, rel); err != nil {
			return fmt.Errorf("%s: link: %w", k.field, err)
		}
	}
	return nil
}

// rel is p relative to the work dir, for the safefs calls on r.dir.
func (r *runner) rel(p string) (string, error) {
	rel, err := filepath.Rel(r.workDir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is not below the work dir %s", p, r.workDir)
	}
	return rel, nil
}

// openWorkRoot makes the work root (0755) when missing and opens it. It is
// refused when the launcher's user could change it or a directory above
// it: root makes the run's directory there and removes it by name at the
// end. A sticky directory such as /tmp is fine, since no other user can
// rename or remove root's entries in it.
func (r *runner) openWorkRoot() (*safefs.Dir, error) {
	if err := os.MkdirAll(r.cfg.WorkRoot, 0o755); err != nil {
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	real, err := resolveTrusted(r.cfg.WorkRoot, r.owner)
	if err != nil {
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	d, err := safefs.Open(real)
	if err != nil {
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	st, err := d.Stat()
	// In a sticky directory only its owner may remove or rename others'
	// entries.
	if err == nil && changeableBy(int(st.Uid), int(st.Gid), os.FileMode(st.Mode).Perm(), r.owner) &&
		(st.Mode&syscall.S_ISVTX == 0 || int(st.Uid) == r.owner.uid) {
		err = fmt.Errorf("%s can be changed by user %s, which runs QEMU", real, r.owner.name)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	return d, nil
}

// longestSocketSuffix is the longest path libvirt puts below a launcher's
// work dir: <dir>/private/libvirt/qemu/channel/target/domain-<id>-<name cut
// to 20>/org.qemu.guest_agent.0, with room for a 2-digit domain id (each
// launcher has a daemon of its own, which numbers its domains from 1).
const longestSocketSuffix = len("/private/libvirt/qemu/channel/target/domain-12-") + 20 + len("/org.qemu.guest_agent.0")

// maxSocketPath is the longest unix socket path (sun_path holds 108 bytes).
const maxSocketPath = 107

// makeWorkDir creates a work dir (0700, root's) with a short random name
// in root, opens it, and refuses a root so long that libvirt's sockets
// would not fit.
func makeWorkDir(root *safefs.Dir) (string, *safefs.Dir, error) {
	if len(root.Path())+1+4+longestSocketSuffix > maxSocketPath {
		return "", nil, fmt.Errorf("--workdir %q: too long for unix socket paths below it (at most %d bytes)",
			root.Path(), maxSocketPath-longestSocketSuffix-5)
	}
	for i := 0; i < 100; i++ {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", nil, err
		}
		name := hex.EncodeToString(b[:])
		err := root.Mkdir(name, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("work dir: %w", err)
		}
		d, err := root.OpenDir(name)
		if err != nil {
			root.Remove(name)
			return "", nil, fmt.Errorf("work dir: %w", err)
		}
		return root.Join(name), d, nil
	}
	return "", nil, fmt.Errorf("work dir: no free name under %s", root.Path())
}

// handOver gives the launcher's user the pod directories (share/,
// private/, ephemeral/, ...), owners changed through descriptors without
// following links (safefs.ChownTree). The work dir itself stays root's,
// mode 0750 with the user's group: the user can reach its directories but
// can neither add nor replace anything root keeps there (launcher.log,
// resolv.conf.*, bin/, the network's restore state). Everything root
// writes into the tree is written before this.
func (r *runner) handOver() error {
	for _, top := range r.podDirs {
		if err := r.dir.ChownTree(top, r.owner.uid, r.owner.gid); err != nil {
			return fmt.Errorf("hand the work dir to user %s: %w", r.owner.name, err)
		}
	}
	if err := r.dir.Chown(0, r.owner.gid); err != nil {
		return err
	}
	return r.dir.Chmod(0o750)
}

// ChownTree hands a directory tree (links themselves, never their targets)
// to uid:gid; see safefs.ChownTree. The bench uses it for its pod trees.
func ChownTree(root string, uid, gid int) error { return safefs.ChownTree(root, uid, gid) }

// pullTimeout bounds the pull of one containerDisk image.
const pullTimeout = 30 * time.Minute

// pullImages fetches the containerDisk images the manifest names by
// reference (anything but an absolute path) into cfg.ImageCache, as the
// kubelet of a cluster would pull them, honouring imagePullPolicy.
func pullImages(ctx context.Context, cfg Config, v *v1.VirtualMachineInstance) (map[string]string, error) {
	cache := &registrydisk.Cache{Dir: cfg.ImageCache, Status: cfg.Status}
	if cfg.Quiet {
		cache.Status = nil
	}
	pulled := map[string]string{}
	for i, vol := range v.Spec.Volumes {
		cd := vol.ContainerDisk
		if cd == nil || filepath.IsAbs(cd.Image) {
			continue
		}
		field := fmt.Sprintf("spec.volumes[%d].containerDisk.image", i)
		// A relative path that names a file here is a local image meant:
		// refused rather than looked up in a registry.
		if relativePath(cd.Image) {
			return nil, fmt.Errorf("%s: %q is a relative path; give the absolute path of a local disk image, or an image reference", field, cd.Image)
		}
		if _, err := os.Stat(cd.Image); err == nil {
			return nil, fmt.Errorf("%s: %q is a relative path to a local file; give its absolute path (a name that is not absolute is an image reference)", field, cd.Image)
		}
		pctx, cancel := context.WithTimeout(ctx, pullTimeout)
		p, err := cache.Fetch(pctx, cd.Image, cd.Path, cd.ImagePullPolicy)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w (a local disk image is given by its absolute path)", field, err)
		}
		pulled[cd.Image] = p
	}
	// A kernelBoot container image by reference: its kernel and initrd.
	fw := v.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil || filepath.IsAbs(fw.KernelBoot.Container.Image) {
		return pulled, nil
	}
	c := fw.KernelBoot.Container
	const field = "spec.domain.firmware.kernelBoot.container"
	if relativePath(c.Image) {
		return nil, fmt.Errorf("%s.image: %q is a relative path; give the absolute path of a local directory, or an image reference", field, c.Image)
	}
	for _, f := range []struct{ name, path string }{{"kernelPath", c.KernelPath}, {"initrdPath", c.InitrdPath}} {
		if f.path == "" {
			continue
		}
		policy := c.ImagePullPolicy
		if policy == "" { // KubeVirt leaves it to the kubelet's default
			policy = vmi.DefaultPullPolicy(c.Image)
		}
		pctx, cancel := context.WithTimeout(ctx, pullTimeout)
		p, err := cache.Fetch(pctx, c.Image, f.path, policy)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w (a local kernel is given by the absolute path of its directory in image)", field, f.name, err)
		}
		pulled[kernelBootKey(c.Image, f.path)] = p
	}
	return pulled, nil
}

// relativePath: an image named ./x or ../x means a local path, never a
// reference to look up in a registry.
func relativePath(image string) bool {
	return strings.HasPrefix(image, "./") || strings.HasPrefix(image, "../")
}

// kernelBootKey names a pulled kernelBoot file in Config.pulled.
func kernelBootKey(image, file string) string { return image + "\x00" + file }

// link is a local file put where a cluster would have mounted it.
type link struct {
	field    string // the manifest field it comes from
	src, dst string // dst relative to the layout, by a Layout method
}

// localImages checks the manifest's local images and says where each goes.
// It stands in for the handler's bind mounts: a containerDisk image is an
// absolute path to a local disk image or a reference pullImages pulled (it
// becomes disk_<i>.img), and a kernelBoot container image an absolute path
// to a directory holding kernelPath and initrdPath.
func (r *runner) localImages(l layout.Layout) ([]link, error) {
	var links []link
	for i, vol := range r.vmi.Spec.Volumes {
		if vol.ContainerDisk == nil {
			continue
		}
		field := fmt.Sprintf("spec.volumes[%d].containerDisk.image", i)
		img := vol.ContainerDisk.Image
		if p, ok := r.cfg.pulled[img]; ok {
			img = p
		}
		if !filepath.IsAbs(img) {
			return nil, fmt.Errorf("%s: %q was not pulled; give an image reference or the absolute path of a local disk image", field, img)
		}
		st, err := os.Stat(img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: %q is not a regular file", field, img)
		}
		links = append(links, link{field, img, l.ContainerDiskImage(i)})
	}
	fw := r.vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil {
		return links, nil
	}
	c := fw.KernelBoot.Container
	const field = "spec.domain.firmware.kernelBoot.container"
	local := filepath.IsAbs(c.Image)
	if local {
		if st, err := os.Stat(c.Image); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s.image: %q is not a directory", field, c.Image)
		}
	}
	for _, f := range []struct{ name, path string }{{"kernelPath", c.KernelPath}, {"initrdPath", c.InitrdPath}} {
		if f.path == "" {
			continue
		}
		src, ok := r.cfg.pulled[kernelBootKey(c.Image, f.path)]
		switch {
		case local:
			src = filepath.Join(c.Image, filepath.Clean("/"+f.path))
		case !ok:
			return nil, fmt.Errorf("%s.image: %q was not pulled; give an image reference or the absolute path of a local directory", field, c.Image)
		}
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, f.name, err)
		}
		links = append(links, link{field + "." + f.name, src, filepath.Join(l.KernelBootDir(), filepath.Base(f.path))})
	}
	return links, nil
}

// stageLauncher puts into the work dir, while root alone can write there,
// what the monitor starts with: copies of the binaries when the launcher's
// user cannot reach the build's, and launcher.log, the output of the
// monitor, launcher and QEMU (a fresh file, O_EXCL and never through a
// link: the fd is handed to QEMU).
func (r *runner) stageLauncher() error {
	for i, name := range []string{"virt-launcher-monitor", "virt-launcher"} {
		b := filepath.Join(r.cfg.BinDir, name)
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("launcher binaries (build them with `make build`): %w", err)
		}
		if !reachable(b, r.owner) {
			// The build's bin/ sits where the user cannot reach it (a clone
			// under /root, or in a mktemp -d directory): run a copy from
			// the work dir, which goes away with the run.
			var err error
			if b, err = copyBinary(b, r.dir, "bin"); err != nil {
				return err
			}
		}
		r.bins[i] = b
	}
	f, err := r.dir.OpenFile("launcher.log", os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("launcher log: %w", err)
	}
	r.logFile = f
	if r.identity, err = writeIdentity(r.dir, "identity", r.owner); err != nil {
		return fmt.Errorf("the VM's passwd and group: %w", err)
	}
	return nil
}

// enterPod puts the calling thread, locked for good, into the pod's
// network namespace (when there is one) and a mount namespace with the
// VM's identity.
func (r *runner) enterPod() error {
	if r.net != nil {
		if err := netns.Set(r.net.pod.NS); err != nil {
			return fmt.Errorf("enter the pod's network namespace: %w", err)
		}
	}
	return r.identity.enter()
}

// startMonitor starts virt-launcher-monitor as the unprivileged user, inside
// the pod network namespace when there is one.
func (r *runner) startMonitor() error {
	monitorBin, launcherBin := r.bins[0], r.bins[1]
	o := launcherflags.ForVMI(r.vmi)
	o.SetLayout(r.layout)
	o.QemuTimeout = r.cfg.QemuTimeout
	o.RunAsNonroot, o.AllowEmulation = true, true
	if r.net != nil {
		o.ResolvConf = r.net.resolvConf()
	}
	o.QemuCapsCache = r.caps
	// kvm.Usable cannot tell a nested setup where guests do not progress;
	// --emulation is for that.
	o.ForceEmulation = r.cfg.Emulation || kvm.Usable() != nil
	args := o.Args()
	logFile := r.logFile
	cmd := exec.Command(monitorBin, args...)
	cmd.Env = monitor.Env(launcherBin)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = r.workDir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: r.owner.credential(),
		// Its own process group: a Ctrl-C on the terminal reaches vlctl
		// only, and vlctl shuts the guest down in order.
		Setpgid:   true,
		Pdeathsig: syscall.SIGTERM,
	}
	if r.net != nil {
		// The launcher's DHCP server binds ports 67 and 547 on the bridge:
		// the one capability a KubeVirt launcher pod keeps.
		cmd.SysProcAttr.AmbientCaps = []uintptr{capNetBindService}
	}
	// Started and waited for from one locked thread, never unlocked: the
	// thread enters the pod's namespaces (network, and the mount namespace
	// with the VM's passwd, identity.go), and the monitor's parent-death
	// signal follows the thread that started it, which must live as long.
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		err := r.enterPod()
		if err == nil {
			err = cmd.Start()
		}
		started <- err
		if err != nil {
			return
		}
		r.exitErr = cmd.Wait()
		close(exited)
	}()
	err := <-started
	// The child has its own copies; root keeps none.
	logFile.Close()
	r.logFile = nil
	r.identity.close()
	if err != nil {
		return fmt.Errorf("start %s: %w", monitorBin, err)
	}
	r.monitor = cmd
	r.exited = exited
	r.log.Info("monitor started", "pid", cmd.Process.Pid, "workdir", r.workDir, "log", r.dir.Join("launcher.log"))
	return nil
}

// reachable reports whether the user o can execute path: every directory
// on the way must be searchable and the file executable for it, judged by
// owner, primary group and other permission bits.
func reachable(path string, o ids) bool {
	allowed := func(p string) bool {
		st, err := os.Stat(p)
		if err != nil {
			return false
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		perm := st.Mode().Perm()
		switch {
		case int(sys.Uid) == o.uid:
			return perm&0o100 != 0
		case int(sys.Gid) == o.gid:
			return perm&0o010 != 0
		default:
			return perm&0o001 != 0
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	for p := abs; ; p = filepath.Dir(p) {
		if !allowed(p) {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

// copyBinary copies the executable src into the directory sub of d
// (created 0755), never through a link, and returns the copy's path.
func copyBinary(src string, d *safefs.Dir, sub string) (string, error) {
	if err := d.MkdirAll(sub, 0o755); err != nil {
		return "", err
	}
	sd, err := d.OpenDir(sub)
	if err != nil {
		return "", err
	}
	defer sd.Close()
	// Whatever root's umask: the launcher's user must reach the copy.
	if err := sd.Chmod(0o755); err != nil {
		return "", err
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	name := filepath.Base(src)
	out, err := sd.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	_, cerr := io.Copy(out, in)
	if err := errors.Join(cerr, out.Chmod(0o755), out.Close()); err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	return sd.Join(name), nil
}

// capNetBindService is CAP_NET_BIND_SERVICE (linux/capability.h).
const capNetBindService = 10

// drive syncs the VMI, streams the console and waits for the guest to end.
func (r *runner) drive(ctx context.Context) error {
	client, err := r.waitReady(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	r.progress("launcher ready; defining and starting the domain")
	defer client.Close()
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = client.Sync(syncCtx, r.vmi, cmdclient.HandlerSyncOptions())
	cancel()
	if err != nil {
		if ctx.Err() != nil { // Ctrl-C while starting: cleanup follows
			return errInterrupted
		}
		return r.userPaths(r.withLauncherLog(fmt.Errorf("sync: %w", err)))
	}
	r.started = true
	r.progress("VM %s/%s is running; console: vlctl console %s/%s (socket %s)",
		r.vmi.Namespace, r.vmi.Name, r.vmi.Namespace, r.vmi.Name, r.consoleSocket())
	// The console outlives ctx: it shows the guest's shutdown after Ctrl-C.
	consoleCtx, closeConsole := context.WithCancel(context.Background())
	defer closeConsole()
	consoleDone := r.streamConsole(consoleCtx)
	started := Started{WorkDir: r.workDir, Layout: r.layout, Socket: r.layout.ReadySocket()}
	if r.net != nil {
		if !r.cfg.Quiet {
			r.net.printForwards(r.cfg.Status)
		}
		started.OutsideNS = r.net.pod.OutsideName
		started.PodAddress = r.net.pod.Pod4.Addr().String()
	}
	r.startedAs = &started
	if err := r.writeRecord(&started); err != nil {
		// The guest runs; only the verbs by name are missing.
		fmt.Fprintf(r.cfg.Status, "vlctl: %v (vlctl ps will not list this VM)\n", err)
	}
	stopControl, err := r.serveControl(ctx, client)
	if err != nil {
		// The guest runs; only vlctl addvolume and removevolume are missing.
		fmt.Fprintf(r.cfg.Status, "vlctl: %v (volumes cannot be plugged into this VM)\n", err)
		stopControl = func() {}
	}
	if r.cfg.Started != nil {
		r.cfg.Started(started)
	}

	stopped, err := r.waitStopped(ctx, client)
	// No request changes the VM while it is stopped and deleted.
	stopControl()
	if err != nil && ctx.Err() == nil {
		return err
	}
	if !stopped { // interrupted: graceful shutdown, as the handler does on deletion
		fmt.Fprintln(r.cfg.Status, "vlctl: shutting the guest down (interrupt again to destroy it at once)")
		if err := r.shutdown(client); err != nil {
			return err
		}
	}
	// Let the console drain what the guest printed last.
	select {
	case <-consoleDone:
	case <-time.After(2 * time.Second):
		closeConsole()
	}
	select {
	case <-r.exited: // nothing left to delete
		return r.waitMonitor(time.Minute)
	default:
	}
	delCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := client.Delete(delCtx, r.vmi); err != nil && !cmdclient.IsDisconnected(err) {
		// The launcher may be ending by itself (its guest is off and it
		// already removed its socket): that is the normal end.
		select {
		case <-r.exited:
			return r.waitMonitor(time.Minute)
		case <-time.After(5 * time.Second):
			return fmt.Errorf("delete domain: %w", err)
		}
	}
	return r.waitMonitor(45 * time.Second)
}

// writeRecord records the run for `vlctl ps`, the verbs by name and vlctl
// gc: first while it starts (st nil), then again once the guest runs.
func (r *runner) writeRecord(st *Started) error {
	pid, start, err := runrecord.Self()
	if err != nil {
		return err
	}
	pod, outside := podnet.NamespaceNames(r.netName)
	rec := &runrecord.Record{Name: r.vmi.Name, Namespace: r.vmi.Namespace, PID: pid, PIDStart: start,
		WorkDir: r.workDir, Socket: r.layout.ReadySocket(), Console: r.consoleSocket(), Control: r.controlSocket(),
		VMI: r.vmi, NetNS: []string{pod, outside}, Keep: r.cfg.Keep}
	if r.lease != nil {
		rec.UID = r.lease.ID
	}
	for _, pb := range r.cfg.Publish {
		rec.Published = append(rec.Published, fmt.Sprintf("%s->%d/tcp", pb.Host, pb.GuestPort))
	}
	for _, d := range slices.Concat(r.disks, r.hot) {
		if g, ok := d.recordedGrant(); ok {
			rec.Grants = append(rec.Grants, g)
		}
	}
	if st != nil {
		rec.Started = time.Now().UTC()
		if st.PodAddress != "" {
			rec.Addresses = append(rec.Addresses, runrecord.Address{IP: st.PodAddress, NetNS: st.OutsideNS})
		}
	}
	path, err := runrecord.Write(r.cfg.RecordDir, rec)
	if err != nil {
		return err
	}
	r.record = path
	return nil
}

func (r *runner) waitReady(ctx context.Context) (*cmdclient.Client, error) {
	deadline := time.After(60 * time.Second)
	for {
		if _, err := os.Stat(r.layout.ReadySocket()); err == nil {
			c, err := cmdclient.DialChecked(ctx, r.layout.ReadySocket(), peerBelow(r.monitor.Process.Pid))
			if err != nil {
				return nil, fmt.Errorf("dial launcher: %w", err)
			}
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.exited:
			return nil, r.withLauncherLog(fmt.Errorf("launcher exited before it was ready: %v", r.exitErr))
		case <-deadline:
			return nil, r.withLauncherLog(errors.New("launcher not ready after 60 s"))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// peerBelow checks that a unix socket is served by a process below pid
// (the run's monitor): the launcher user owns the directories the sockets
// are in, and every VM's processes may run as that user, so the path alone
// does not say whose socket it is. The listener's kernel credentials do.
func peerBelow(pid int) func(net.Conn) error {
	return func(conn net.Conn) error {
		peer, err := unixgrpc.PeerPID(conn)
		if err != nil {
			return err
		}
		if !procfs.IsAncestor("/proc", pid, peer) {
			return fmt.Errorf("the socket's listener (pid %d) is not a process of this run (monitor pid %d); refused", peer, pid)
		}
		return nil
	}
}

// streamConsole copies the serial console to cfg.Console until the guest
// closes it.
func (r *runner) streamConsole(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sock := r.layout.SerialSocket(string(r.vmi.UID))
		var conn net.Conn
		for i := 0; i < 100; i++ {
			c, err := net.Dial("unix", sock)
			if err == nil {
				if err := peerBelow(r.monitor.Process.Pid)(c); err != nil {
					c.Close()
					fmt.Fprintf(r.cfg.Status, "vlctl: serial console: %v\n", err)
					return
				}
				conn = c
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		if conn == nil {
			fmt.Fprintf(r.cfg.Status, "vlctl: no serial console at %s\n", sock)
			return
		}
		defer conn.Close()
		go func() { <-ctx.Done(); conn.Close() }()
		hub, err := newConsoleHub(conn, r.cfg.Console, r.consoleSocket())
		if err != nil {
			fmt.Fprintf(r.cfg.Status, "vlctl: %v (vlctl console by name will not attach)\n", err)
			io.Copy(r.cfg.Console, conn)
			return
		}
		defer hub.close()
		if r.cfg.keys != nil {
			hub.attachKeys(r.cfg.keys)
		}
		hub.run()
	}()
	return done
}

// relayDNS starts the guest's DNS relay (dnsRelay). Without it the guest
// has no resolver, which is worth a warning, not a failed run.
func (r *runner) relayDNS() {
	upstream := r.cfg.DNS
	if len(upstream) == 0 {
		var err error
		if upstream, err = hostResolvers("/etc/resolv.conf"); err != nil {
			fmt.Fprintf(r.cfg.Status, "vlctl: warning: the guest gets no DNS: host resolvers: %v\n", err)
			return
		}
	}
	d, err := startDNSRelay(r.net.pod.Outside, r.net.pod.Outside4.Addr(), upstream)
	if err != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: warning: the guest gets no DNS: %v\n", err)
		return
	}
	r.dns = d
	r.progress("guest DNS relayed to %s", strings.Join(upstream, ", "))
}

// progress tells what the run is doing, unless --quiet.
func (r *runner) progress(format string, a ...any) {
	if !r.cfg.Quiet {
		fmt.Fprintf(r.cfg.Status, "vlctl: "+format+"\n", a...)
	}
}

// pumpKeys reads in (a terminal) into the channel it returns, closed at
// in's end. It outlives Run: a terminal read does not end with the run,
// and the process ends soon after.
func pumpKeys(in io.Reader) <-chan []byte {
	keys := make(chan []byte)
	go func() {
		defer close(keys)
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				keys <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				return
			}
		}
	}()
	return keys
}

// consoleSocket is where vlctl run shares the guest's serial console
// (consoleHub): in the work dir, which stays root's.
func (r *runner) consoleSocket() string { return filepath.Join(r.workDir, "console.sock") }

// waitStopped polls the domain until it is off. It returns false when ctx
// ends first.
func (r *runner) waitStopped(ctx context.Context, c *cmdclient.Client) (bool, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var reported string // the guest agent's report last shown
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-r.exited:
			return r.launcherGone()
		case <-t.C:
		}
		d, err := getDomain(ctx, c)
		st := domainState(d)
		if g := guestReport(d); err == nil && g != "" && g != reported {
			r.progress("guest agent: %s", g)
			reported = g
		}
		if err != nil {
			// The launcher ends by itself once QEMU is gone and its last
			// event is out; a refused call is then the normal end.
			select {
			case <-r.exited:
				return r.launcherGone()
			case <-time.After(5 * time.Second):
				return false, err
			}
		}
		switch st {
		case "Shutoff", "Crashed", "NoState":
			r.progress("guest is %s", st)
			if st == "Crashed" {
				return true, errors.New("guest crashed")
			}
			return true, nil
		}
	}
}

// launcherGone interprets the launcher's exit while the guest was running:
// status 0 means the domain ended and the launcher finished normally.
func (r *runner) launcherGone() (bool, error) {
	if r.exitErr != nil {
		return false, r.withLauncherLog(fmt.Errorf("launcher exited while the guest ran: %v", r.exitErr))
	}
	fmt.Fprintln(r.cfg.Status, "vlctl: guest powered off")
	return true, nil
}

func domainStatus(ctx context.Context, c *cmdclient.Client) (string, error) {
	d, err := getDomain(ctx, c)
	if err != nil {
		return "", err
	}
	return domainState(d), nil
}

// getDomain asks the launcher for its Domain; nil when none is defined.
func getDomain(ctx context.Context, c *cmdclient.Client) (*domainjson.Domain, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, exists, err := c.GetDomain(gctx)
	if err != nil {
		return nil, fmt.Errorf("get domain: %w", err)
	}
	if !exists {
		return nil, nil
	}
	return d, nil
}

// domainState is the Domain's state, NoState without one.
func domainState(d *domainjson.Domain) string {
	if d == nil {
		return "NoState"
	}
	return string(d.Status.Status)
}

// guestReport is one line of what the guest agent put in the Domain's
// status: the OS, then each interface with its addresses ("" before the
// agent reported anything).
func guestReport(d *domainjson.Domain) string {
	if d == nil {
		return ""
	}
	var parts []string
	osi := d.Status.OSInfo
	if name := cmp.Or(osi.PrettyName, osi.Name); name != "" {
		parts = append(parts, name)
	}
	for _, i := range d.Status.Interfaces {
		ips := i.IPs
		if len(ips) == 0 && i.Ip != "" {
			ips = []string{i.Ip}
		}
		if len(ips) == 0 {
			continue
		}
		parts = append(parts, cmp.Or(i.InterfaceName, i.Mac)+" "+strings.Join(ips, " "))
	}
	return strings.Join(parts, "; ")
}

// shutdown asks for an ACPI power-off and destroys the guest when the grace
// period ends first. Like virt-handler it asks again at most every 5 s while
// the guest is neither off nor shutting down. The launcher may exit on its
// own as soon as the guest is off: that is the normal end, not an error.
func (r *runner) shutdown(c *cmdclient.Client) error {
	ctx := context.Background()
	grace := time.Duration(vmi.GracePeriodSeconds(r.vmi)) * time.Second
	deadline := time.Now().Add(grace)
	var asked time.Time
	for {
		select {
		case <-r.exited:
			return nil
		default:
		}
		st, err := domainStatus(ctx, c)
		if err != nil {
			select {
			case <-r.exited:
				return nil
			case <-time.After(5 * time.Second):
				return err
			}
		}
		forced := false
		select {
		case <-r.cfg.Force:
			forced = true
		default:
		}
		switch {
		case st == "Shutoff" || st == "Crashed" || st == "NoState":
			return nil
		case forced || time.Now().After(deadline):
			if forced {
				fmt.Fprintln(r.cfg.Status, "vlctl: interrupted again, destroying the guest")
			} else {
				fmt.Fprintln(r.cfg.Status, "vlctl: grace period over, destroying the guest")
			}
			kctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := c.Kill(kctx, r.vmi); err != nil && !cmdclient.IsDisconnected(err) {
				return fmt.Errorf("kill: %w", err)
			}
			return nil
		case st != "ShuttingDown" && time.Since(asked) >= 5*time.Second:
			asked = time.Now()
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := c.Shutdown(sctx, r.vmi)
			cancel()
			if err != nil && !cmdclient.IsDisconnected(err) {
				// The guest may have gone off between the status and the
				// request; the next status read tells.
				r.log.Info("shutdown request failed", "reason", err)
			}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.cfg.Force:
		}
	}
}

func (r *runner) waitMonitor(timeout time.Duration) error {
	select {
	case <-r.exited:
	case <-time.After(timeout):
		r.monitor.Process.Signal(syscall.SIGTERM)
		<-r.exited
		return r.withLauncherLog(fmt.Errorf("launcher did not exit within %s of the domain's deletion", timeout))
	}
	if r.exitErr != nil {
		return r.withLauncherLog(fmt.Errorf("launcher: %w", r.exitErr))
	}
	return nil
}

// withLauncherLog adds the end of the launcher's log to an error, which is
// where the reason usually is. Only the last 64 KiB are read: the launcher
// and QEMU write the file.
func (r *runner) withLauncherLog(err error) error {
	if r.dir == nil {
		return err
	}
	f, rerr := r.dir.OpenRegular("launcher.log")
	if rerr != nil {
		return err
	}
	defer f.Close()
	const tail = 64 << 10
	if st, serr := f.Stat(); serr == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, rerr := io.ReadAll(io.LimitReader(f, tail))
	if rerr != nil || len(b) == 0 {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Errorf("%w\nlast launcher log lines:\n%s", err, strings.Join(lines, "\n"))
}

// cleanup stops whatever is still running and removes what Run made.
func (r *runner) cleanup() error {
	var errs []error
	if r.monitor != nil {
		select {
		case <-r.exited:
		default:
			r.monitor.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-r.cfg.Force:
				killTree(r.monitor.Process.Pid)
				<-r.exited
			case <-time.After(60 * time.Second):
				killTree(r.monitor.Process.Pid)
				<-r.exited
			}
		}
	}
	// The pod is gone only when nothing runs as the VM's id any more: a
	// monitor killed outright leaves its launcher (told by its parent-death
	// signal) shutting the guest down, and QEMU. Nothing is removed while
	// they run on the work dir.
	podGone := true
	if err := r.endVMProcesses(); err != nil {
		errs = append(errs, err)
		podGone = false
	}
	if r.pub != nil {
		r.pub.close()
	}
	if err := r.stopEgress(); err != nil {
		errs = append(errs, err)
	}
	if r.dns != nil {
		r.dns.close()
	}
	if r.net != nil {
		if err := r.net.teardown(); err != nil {
			errs = append(errs, err)
		}
	}
	r.releaseDisks()
	if r.logFile != nil { // staged, the monitor never started
		r.logFile.Close()
		r.logFile = nil
		r.identity.close()
	}
	// os.RemoveAll works through descriptors and does not follow links
	// below the work dir, whose own parent only root can change. The work
	// dir is taken back first (0700, root's): every process of the
	// launcher's user has ended, but another process of that user could
	// still add entries to the tree while it is removed.
	// A kept work dir is taken back as well: the VM's id goes back to the
	// pool, and whichever VM gets it next must not reach into this one.
	if r.workDir != "" && !podGone {
		fmt.Fprintf(r.cfg.Status, "vlctl: kept %s: processes of the VM still run (vlctl gc removes it)\n", r.workDir)
	} else if r.workDir != "" {
		if err := takeBack(r.dir); err != nil {
			errs = append(errs, err)
		} else if r.cfg.Keep {
			fmt.Fprintf(r.cfg.Status, "vlctl: kept %s (root's alone now)\n", r.workDir)
		} else if err := os.RemoveAll(r.workDir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", r.workDir, err))
		}
	}
	r.dir.Close()
	// The id goes back once nothing runs as it; otherwise its lease stays
	// for vlctl gc.
	if err := r.lease.Release("/proc"); err != nil {
		errs = append(errs, err)
	}
	// Last: until everything above is done, a vlctl killed meanwhile
	// leaves its record for vlctl gc. One that failed stays for it too.
	if r.record != "" {
		if len(errs) > 0 {
			errs = append(errs, fmt.Errorf("kept the run's record %s: vlctl gc retries what failed", r.record))
		} else if err := runrecord.Remove(r.record); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// takeBack closes the work dir to everyone but root, so that nothing
// below it changes while root removes it.
func takeBack(dir *safefs.Dir) error {
	if dir == nil {
		return nil
	}
	if err := dir.Chmod(0o700); err != nil {
		return fmt.Errorf("take back the work dir: %w", err)
	}
	return nil
}

// vmEndWait is how long the VM's processes left after the monitor get to
// end by themselves (a launcher shutting its guest down) before SIGKILL.
const vmEndWait = 30 * time.Second

// endVMProcesses waits for every process that runs as the VM's id to end,
// vmEndWait at most (less on a second Ctrl-C), then kills what is left.
// Only the VM's processes run as its id, so nothing else is touched.
func (r *runner) endVMProcesses() error {
	if r.lease == nil {
		return nil
	}
	left := func() []int {
		pids, _ := procfs.WithID("/proc", r.lease.ID, false)
		return pids
	}
	if len(left()) == 0 {
		return nil
	}
	r.log.Info("processes of the VM outlive its monitor; waiting for them", "uid", r.lease.ID, "pids", left())
	deadline := time.After(vmEndWait)
wait:
	for len(left()) > 0 {
		select {
		case <-deadline:
			break wait
		case <-r.cfg.Force:
			break wait
		case <-time.After(100 * time.Millisecond):
		}
	}
	for try := 0; try < 50; try++ {
		pids := left()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			// A pidfd pins the process; checked again through it, a pid
			// reused since the listing is never signalled.
			proc, err := os.FindProcess(pid)
			if err != nil {
				continue
			}
			if slices.Contains(left(), pid) {
				proc.Signal(syscall.SIGKILL)
			}
			proc.Release()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("processes %v of the VM (uid %d) survive SIGKILL", left(), r.lease.ID)
}

// killTree kills the monitor and every process below it. The launcher and
// libvirt's daemon run in process groups of their own and QEMU is
// libvirt's child, so the monitor's group alone would leave them running.
// It repeats until no descendant is left, for children forked meanwhile.
func killTree(pid int) {
	for i := 0; i < 20; i++ {
		below := descendants(pid)
		if len(below) == 0 {
			break
		}
		for _, p := range below {
			// A pidfd pins the process: checked again through it, a pid
			// reused since the snapshot is never signalled.
			proc, err := os.FindProcess(p)
			if err != nil {
				continue
			}
			if slices.Contains(descendants(pid), p) {
				proc.Signal(syscall.SIGKILL)
			}
			proc.Release()
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// descendants lists the living processes below pid, by /proc's parent
// links (zombies are skipped: they are dead already).
func descendants(pid int) []int {
	all, _ := procfs.List("/proc")
	var out []int
	for _, p := range procfs.Descendants(all, pid) {
		if p.State != 'Z' {
			out = append(out, p.PID)
		}
	}
	return out
}
