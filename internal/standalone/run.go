// Package standalone plays virt-handler's part on one machine for `vlctl run`:
// it prepares a working directory laid out like a launcher pod, links local
// disk images where a cluster would mount container disks, sets up the pod
// network in namespaces of its own, starts the monitor and launcher as an
// unprivileged user, syncs the VMI, streams the serial console and cleans all
// of it up at the end. Who does what with which rights: docs/standalone.md;
// the walk through one run: docs/architecture.md, "Standalone".
package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/capscache"
	"github.com/virtlauncher/virtlauncher/internal/dvimport"
	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// session is one `vlctl run`: the user's Config (with its defaults), and
// what Run works out from it before the first boot, which every boot of
// the run (runOnce, a runner each) shares.
type session struct {
	Config
	// pulled maps those references to their cached disks (Run fills it).
	pulled map[string]string
	// configVols are the config volumes' files from the documents (Run
	// fills it; configvol.go).
	configVols []configVolume
	// shares are the VMI's virtiofs filesystems and what each serves
	// (virtiofs.go), worked out by check.
	shares []virtiofsShare
	// keys carries Input, read by one goroutine for the whole run.
	keys <-chan []byte
	// ports are the --publish listeners, held for the whole run (Run
	// makes them; each boot points them at its pod: guestnet.Services).
	ports *guestnet.HeldPorts
	// guest is where the guest comes from: the manifest booted, or
	// MigrateFrom's run (guest.go).
	guest guestSource
	// deviceEnv and vfioGroups are what check found for Devices: the
	// device plugin's variables for the launcher, the IOMMU groups' nodes
	// the VM's user must open.
	deviceEnv, vfioGroups []string
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
func Run(ctx context.Context, c Config) error {
	c.defaults()
	cfg := &session{Config: c, guest: boot{}}
	if err := needRoot(); err != nil {
		return err
	}
	// What runs killed before left (their records say what) goes first.
	if err := GC(cfg.RecordDir, gcWait, cfg.Status); err != nil {
		fmt.Fprintf(cfg.Status, "vlctl: warning: %v\n", err)
	}
	if cfg.MigrateFrom != "" {
		m, err := takeOver(cfg)
		if err != nil {
			return err
		}
		cfg.guest = m
	}
	v, vm, policy, specs, err := cfg.check()
	if err != nil {
		return err
	}
	if w := memoryWarning(v); w != "" {
		fmt.Fprintln(cfg.Status, w)
	}
	if err := cfg.guest.ready(ctx, cfg, v, vm, specs); err != nil {
		return err
	}
	if cfg.Input != nil {
		cfg.keys = pumpKeys(cfg.Input)
	}
	if len(cfg.Publish) > 0 {
		cfg.ports = guestnet.NewHeldPorts(cfg.Status)
		defer cfg.ports.Close()
	}
	for failures := 0; ; {
		started, migrated, err := runOnce(ctx, *cfg, v.DeepCopy(), vm)
		// A guest that went to another run goes on there, run strategy
		// and all: starting it here again would run it twice.
		if ctx.Err() != nil || !started || migrated {
			return err
		}
		cfg.guest, v = cfg.guest.restart(v)
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

// needRoot refuses a run by anyone but root, before anything fails
// half-way with EPERM on /run/vl.
func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("vlctl run needs root: it builds network namespaces, grants QEMU access to your disks and runs each VM as a user id of its own; run it with sudo")
	}
	return nil
}

// Check does what Run does with a manifest before it makes anything (not
// for --migrate-from): it loads the documents, expands the instancetype,
// plans the storage and refuses what vlctl cannot run, with the errors
// Run would give. It returns the VM's namespace and name.
func Check(cfg Config) (namespace, name string, err error) {
	cfg.defaults()
	if err := needRoot(); err != nil {
		return "", "", err
	}
	v, _, _, _, err := (&session{Config: cfg, guest: boot{}}).check()
	if err != nil {
		return "", "", err
	}
	return v.Namespace, v.Name, nil
}

// check loads the manifest (or, taking a guest over, its source's) and
// refuses what vlctl does not run; nothing is made. An error is a
// *ManifestError but for a migration's source.
func (cfg *session) check() (v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, policy restartPolicy, specs []userstorage.Spec, err error) {
	if v, vm, err = cfg.guest.load(cfg); err != nil {
		return nil, nil, policy, nil, &ManifestError{Err: err}
	}
	// A guest taken over runs already, whatever its strategy says of
	// starting it.
	policy, err = runPolicy(vm, cfg.ForceStart || cfg.guest.running())
	if err == nil {
		err = runUnsupported(v)
	}
	if err == nil {
		cfg.shares, err = virtiofsShares(v)
	}
	if err == nil {
		cfg.deviceEnv, cfg.vfioGroups, err = runDevices(v, cfg.Devices, vfioSys{Root: "/"})
	}
	if err == nil {
		var mayUse []uint
		if mayUse, _, err = (hostcpu.Sys{Root: "/"}).OwnCPUSet("self"); err == nil {
			err = runCPUs(v, cfg.CPUSet, mayUse)
		} else {
			err = fmt.Errorf("the CPUs vlctl may use: %w", err)
		}
	}
	if err == nil {
		specs, err = userstorage.Plan(v, vm, cfg.Volumes, cfg.hostPaths())
	}
	if err != nil {
		return nil, nil, policy, nil, &ManifestError{Err: fmt.Errorf("%s: %w", cfg.manifestName(), err)}
	}
	return v, vm, policy, specs, nil
}

// runOnce boots the guest once (or takes it over, cfg.source); started
// reports whether its domain ran, migrated whether it went to another run.
func runOnce(ctx context.Context, cfg session, v *v1.VirtualMachineInstance, vm *v1.VirtualMachine) (started, migrated bool, err error) {
	pool, err := uidpool.ForMachine(cfg.UIDs)
	if err != nil {
		return false, false, fmt.Errorf("--uids: %w", err)
	}
	owner, err := leaseVMID(pool)
	if err != nil {
		return false, false, err
	}
	run := &runner{cfg: cfg, vmi: v, vm: vm, owner: owner, storage: userstorage.NewHeld(owner.User, cfg.Status), log: cfg.Log,
		virtiofs: virtiofsContainers{shares: cfg.shares}}
	defer func() {
		if cerr := run.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		started, migrated = run.started, run.away.gone()
	}()
	if err := run.prepare(); err != nil {
		return false, false, err
	}
	run.progress("prepared %s", run.workDir)
	// Recorded before the network exists: whatever kills vlctl from here
	// on, vlctl gc finds all the run made outside its work dir.
	if run.pod.netName, err = podnet.NewName(); err != nil {
		return false, false, err
	}
	if err := run.writeRecord(nil); err != nil {
		return false, false, err
	}
	caps := capscache.Options{Dir: cfg.CapsCache, Pool: pool, Work: run.dir, Log: cfg.Log, Progress: run.progress}
	if run.caps, err = capscache.Ensure(ctx, caps); err != nil {
		// Not fatal: the launcher probes QEMU itself, 2.5 s later.
		fmt.Fprintf(cfg.Status, "vlctl: warning: no shared QEMU capability cache: %v\n", err)
	}
	if err := run.stageLauncher(); err != nil {
		return false, false, err
	}
	if err := run.launch(ctx); err != nil {
		return false, false, err
	}
	run.progress("launcher starting as %s", run.owner.Name)
	return false, false, run.drive(ctx)
}

// DefaultWorkRoot is where the runs' work directories go: short, because
// unix socket paths are limited to 107 bytes.
const DefaultWorkRoot = "/run/vl"

// DefaultQemuTimeout is how long the launcher waits for its domain.
const DefaultQemuTimeout = 5 * time.Minute

func (c *Config) defaults() {
	if c.Binding == "" {
		c.Binding = vmi.BindingMasquerade
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
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
	if c.VolumeStore == "" {
		c.VolumeStore = userstorage.DefaultVolumeStore
	}
	if c.ImportCache == "" {
		c.ImportCache = dvimport.DefaultCacheDir
	}
	if c.CapsCache == "" {
		c.CapsCache = capscache.DefaultDir
	}
	if c.QemuTimeout == 0 {
		c.QemuTimeout = DefaultQemuTimeout
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

type runner struct {
	cfg session
	vmi *v1.VirtualMachineInstance
	vm  *v1.VirtualMachine // nil for a VMI manifest
	// owner is the VM's own id, leased for the boot; cleanup gives it
	// back.
	owner vmID
	// storage is the user's own storage, the volumes plugged in while the
	// guest runs and the pulled images, open for the run with its access.
	storage *userstorage.Held
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
	// pod is the VM's pod as this boot makes it (vmpod.go).
	pod    vmPod
	record string // the run's record file, once written
	// guestNet are the guest's network services on the pod network
	// (DNS, published ports, egress), once it is up.
	guestNet *guestnet.Services
	// caps is the trusted QEMU capability cache the launcher seeds its
	// daemon from (internal/capscache), "" for none.
	caps string
	// away is the guest leaving for another run (migrateOut).
	away departure
	// virtiofs are the pod's virtiofs containers, for the VMI's
	// filesystems (virtiofs.go).
	virtiofs virtiofsContainers
}

// cleanup stops whatever is still running and removes what Run made.
func (r *runner) cleanup() error {
	var errs []error
	r.pod.stopMonitor(r.cfg.Force)
	// The virtiofs daemons end when QEMU lets go of them; those still
	// there (QEMU never started) are ended as a pod's containers are.
	r.virtiofs.stop()
	// The pod is gone only when nothing runs as the VM's id any more: a
	// monitor killed outright leaves its launcher (told by its parent-death
	// signal) shutting the guest down, and QEMU. Nothing is removed while
	// they run on the work dir.
	podGone := true
	if err := r.owner.endProcesses(r.cfg.Force, r.log); err != nil {
		errs = append(errs, err)
		podGone = false
	}
	// The guest's network services go before the pod network.
	if err := r.guestNet.Close(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, r.pod.teardown(podGone)...)
	r.storage.Release(r.started)
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
		handedOver := r.away.gone() && r.launcherRoot() == r.workDir
		if err := takeBack(r.dir); err != nil {
			errs = append(errs, err)
		} else if handedOver {
			// The guest's new run sees its pod at this path.
			if err := handedOverRoot(r.workDir); err != nil {
				errs = append(errs, fmt.Errorf("empty %s: %w", r.workDir, err))
			}
		} else if r.cfg.Keep {
			fmt.Fprintf(r.cfg.Status, "vlctl: kept %s (root's alone now)\n", r.workDir)
		} else if err := os.RemoveAll(r.workDir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", r.workDir, err))
		}
		// The first run's work dir this run's launcher saw its own at
		// goes with the VM's last run: one that took the guest over
		// (started) and did not hand it on. A migration in that did not
		// complete leaves it to the source, whose work dir it is.
		if root := r.launcherRoot(); root != r.workDir && r.started && !r.away.gone() {
			if _, err := removeLauncherRoot(root); err != nil {
				errs = append(errs, err)
			}
		}
	}
	r.dir.Close()
	// The id goes back once nothing runs as it; otherwise its lease stays
	// for vlctl gc.
	if err := r.owner.release(); err != nil {
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
