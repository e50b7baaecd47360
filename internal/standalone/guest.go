package standalone

import (
	"context"
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

// guestSource is where a run's guest comes from: booted from the manifest
// (boot) or taken over by live migration from a running `vlctl run`
// (migrationIn, --migrate-from). The run is the same either way; the steps
// that differ are this interface's, called in this order: load, ready
// (once per vlctl run), then per boot hostDirs, launcherRoot,
// publishesAtLaunch and start; restart says what the next boot comes from.
type guestSource interface {
	// load returns the VMI and VirtualMachine (nil for a VMI manifest)
	// the run is of; nothing is made.
	load(cfg *session) (*v1.VirtualMachineInstance, *v1.VirtualMachine, error)
	// name names the manifest in errors.
	name(cfg *session) string
	// running: the guest runs already, whatever its run strategy says of
	// starting it.
	running() bool
	// ready makes, before the first boot, what the guest's disks need:
	// the images (cfg.pulled) and the volumes specs (Plan's) of vm.
	ready(ctx context.Context, cfg *session, v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, specs []userstorage.Spec) error
	// hostDirs are the directories a hostDisk may be below besides the
	// --allow-host-path ones.
	hostDirs() []string
	// launcherRoot is the path the run's launcher sees its work dir
	// (workDir) at.
	launcherRoot(workDir string) string
	// publishesAtLaunch: the published ports are pointed at the pod as
	// soon as its network is up, before the launcher starts (otherwise
	// start publishes them).
	publishesAtLaunch() bool
	// start brings the guest up in the launcher c serves. consoleDone,
	// when not nil, is the console stream (on consoleCtx) start attached
	// already.
	start(ctx, consoleCtx context.Context, r *runner, c *cmdclient.Client) (consoleDone <-chan struct{}, err error)
	// restart is the source of the guest's next boot in this vlctl run
	// (its run strategy's restart), and the VMI it boots.
	restart(v *v1.VirtualMachineInstance) (guestSource, *v1.VirtualMachineInstance)
}

// boot starts the guest from the manifest.
type boot struct{}

func (boot) load(cfg *session) (*v1.VirtualMachineInstance, *v1.VirtualMachine, error) {
	v, vm, vols, err := loadManifest(cfg.ManifestOptions)
	if err != nil {
		return nil, nil, err
	}
	cfg.configVols = vols
	stored, err := cfg.store().Volumes(v, vm, cfg.Volumes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cfg.manifestName(), err)
	}
	cfg.Volumes = append(cfg.Volumes, stored...)
	return v, vm, nil
}

func (boot) name(cfg *session) string { return cfg.manifestFiles() }

func (boot) running() bool { return false }

func (boot) ready(ctx context.Context, cfg *session, v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, specs []userstorage.Spec) error {
	var err error
	if cfg.pulled, err = pullImages(ctx, cfg.ImageCache, cfg.progressOut(), v); err != nil {
		return err
	}
	return cfg.store().Prepare(ctx, cfg.Volumes, specs, vm)
}

func (boot) hostDirs() []string { return nil }

func (boot) launcherRoot(workDir string) string { return workDir }

func (boot) publishesAtLaunch() bool { return true }

// start defines and starts the domain: the Sync virt-handler does.
func (boot) start(ctx, _ context.Context, r *runner, c *cmdclient.Client) (<-chan struct{}, error) {
	r.progress("launcher ready; defining and starting the domain")
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := c.Sync(syncCtx, r.vmi, cmdclient.HandlerSyncOptions())
	cancel()
	if err != nil {
		if ctx.Err() != nil { // Ctrl-C while starting: cleanup follows
			return nil, errInterrupted
		}
		return nil, r.storage.UserPaths(r.withLauncherLog(fmt.Errorf("sync: %w", err)), r.layout)
	}
	return nil, nil
}

func (b boot) restart(v *v1.VirtualMachineInstance) (guestSource, *v1.VirtualMachineInstance) {
	return b, v
}

// migrationIn takes over the guest of a running vlctl run, src.
type migrationIn struct{ src *runrecord.Entry }

// takeOver finds the running VM --migrate-from names and takes its
// published ports and storage for this run.
func takeOver(cfg *session) (migrationIn, error) {
	// The running guest's VMI, as its launcher was synced with, and its
	// VirtualMachine: the run strategy goes on here.
	src, err := findSource(cfg.Config)
	if err != nil {
		return migrationIn{}, err
	}
	if _, err := migrationOptions(cfg.MigrationBandwidth); err != nil {
		return migrationIn{}, err
	}
	// The documents behind config volumes stay with the first run.
	if hasConfigVolumes(src.VMI) {
		return migrationIn{}, fmt.Errorf("--migrate-from %s: configMap, secret and sysprep volumes and cloud-init Secrets are not carried over yet", src.FullName())
	}
	cfg.Emulation = cfg.Emulation || src.Emulation
	if cfg.Publish, err = guestnet.ParseRecorded(src.Published); err != nil {
		return migrationIn{}, fmt.Errorf("--migrate-from %s: %w", src.FullName(), err)
	}
	// The same files: shared, never copied (migrationVMI).
	for claim, path := range src.Volumes {
		cfg.Volumes = append(cfg.Volumes, userstorage.VolumeMap{Name: claim, Path: path})
	}
	return migrationIn{src: src}, nil
}

func (m migrationIn) load(*session) (*v1.VirtualMachineInstance, *v1.VirtualMachine, error) {
	var vm *v1.VirtualMachine
	if m.src.VM != nil {
		vm = m.src.VM.DeepCopy()
	}
	return m.src.VMI.DeepCopy(), vm, nil
}

func (m migrationIn) name(*session) string { return m.src.FullName() }

// running: --force-start was the first run's to give.
func (migrationIn) running() bool { return true }

// ready: the very images the guest's disks are backed with there; the
// volumes are that run's, ready already.
func (m migrationIn) ready(_ context.Context, cfg *session, _ *v1.VirtualMachineInstance, _ *v1.VirtualMachine, _ []userstorage.Spec) error {
	var err error
	cfg.pulled, err = sourceImages(m.src)
	return err
}

// hostDirs: the directories of the source's hostDisks (that run was
// allowed them; the manifest is the one it ran).
func (m migrationIn) hostDirs() []string { return sourceHostDirs(m.src.VMI) }

// launcherRoot: both launchers see their pod at one path, the first
// run's work dir.
func (m migrationIn) launcherRoot(string) string { return m.src.Root() }

// publishesAtLaunch: no, the ports are published once the guest is here
// (start).
func (migrationIn) publishesAtLaunch() bool { return false }

func (m migrationIn) start(ctx, consoleCtx context.Context, r *runner, c *cmdclient.Client) (<-chan struct{}, error) {
	// Attached before the migration starts (QEMU's console socket appears
	// with the incoming QEMU): the guest prints from the moment it runs
	// here, and a console socket without a reader drops what it gets.
	consoleDone := r.streamConsole(consoleCtx, migrationTimeout)
	if err := r.migrateIn(ctx, c, m.src); err != nil {
		if ctx.Err() != nil && !r.started {
			return consoleDone, fmt.Errorf("interrupted: %w", err)
		}
		return consoleDone, err
	}
	// The old run handed its published listeners over with the
	// migration's answer (migrateIn); any it did not hand over are bound
	// once it lets go of them.
	if err := r.guestNet.Publish(time.Minute); err != nil {
		// The guest runs here now: losing it over a port would be worse
		// than the port.
		fmt.Fprintf(r.cfg.Status, "vlctl: warning: %v\n", err)
	}
	return consoleDone, nil
}

// restart: taken over and ended here, the guest boots afresh.
func (migrationIn) restart(v *v1.VirtualMachineInstance) (guestSource, *v1.VirtualMachineInstance) {
	return boot{}, bootVMI(v)
}
