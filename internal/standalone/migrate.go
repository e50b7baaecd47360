package standalone

// Live migration between two `vlctl run` pods on one machine (vlctl run
// --migrate-from NAME; docs/migration.md §8). The new run plays the target's
// virt-handler: it builds a pod of its own (work dir, user id, network),
// starts its launcher as a migration target and asks the running VM's run,
// over that run's control socket, to migrate there. The source run plays the
// source's virt-handler: it opens the migration proxies in its pod
// (libvirt's connection, QEMU's memory stream and the block migration's NBD
// stream, each to the target pod's socket of the same name), starts the
// migration and answers when it has ended. Once it has completed, the target
// finalizes it and goes on as any run does; the source sees its guest
// Shutoff/Migrated, says where it went and ends with status 0.
//
// The guest's domain names its disks, sockets and logs by path, so both
// launchers must see their pod at one path, as pods on two nodes do: the
// target's launcher gets a mount namespace where its work dir is bound at
// the path the source's launcher sees (the first run's work dir). That
// directory is kept, empty, while a run of the VM uses it (LauncherRoot in
// the run records).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/api/resource"
	k8stypes "k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/migrationproxy"
	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// migrationTimeout bounds a migration from the request to its end. The
// launcher's own limits end a migration that stalls (no progress for
// 150 s) or takes too long (150 s per GiB) well before it.
const migrationTimeout = time.Hour

// migrateRequestLimit bounds the migrate request's connection: the
// migration, then its cancel and the answer.
const migrateRequestLimit = migrationTimeout + 2*time.Minute

// departure is this run's guest leaving for another run (migrateOut). The
// run asks it rather than following the migration itself: is the guest
// leaving (the domain going away or the launcher ending is then the guest
// going, not a power-off), and has it gone (the run then ends without
// starting it again, and hands its pod's path on).
type departure struct {
	// leaving is set while a migration is under way and for good once
	// one completed; the control socket's goroutine sets it, the run's
	// wait for the guest's end reads it.
	leaving atomic.Bool
	// to says where the guest went once a migration completed; "" while
	// it is here.
	to string
}

// begin refuses a second migration of a guest gone already.
func (d *departure) begin() error {
	if d.to != "" {
		return fmt.Errorf("the guest already went to %s", d.to)
	}
	return nil
}

// gone: a migration completed, the guest runs in another run now.
func (d *departure) gone() bool { return d.to != "" }

// tookDomain says whether the domain's state d is the guest gone to
// another run: its domain Shutoff for Migrated, or ended while leaving.
func (d *departure) tookDomain(dom *domainjson.Domain) bool {
	st := domainState(dom)
	return (st == "Shutoff" && dom.Status.Reason == "Migrated") || ((st == "Shutoff" || st == "NoState") && d.leaving.Load())
}

// sayEnded says how the guest's time here ended when its launcher ended
// normally: gone to another run while leaving, powered off otherwise;
// printed with --quiet too.
func (d *departure) sayEnded(w io.Writer) {
	if d.leaving.Load() {
		sayMigrated(w)
		return
	}
	sayPoweredOff(w)
}

// sayMigrated says the guest went to another run.
func sayMigrated(w io.Writer) {
	fmt.Fprintln(w, "vlctl: guest migrated to another run; this one ends")
}

// sayPoweredOff says the guest ended normally.
func sayPoweredOff(w io.Writer) { fmt.Fprintln(w, "vlctl: guest powered off") }

// migrationOptions are KubeVirt's defaults (docs/migration.md §1):
// unlimited bandwidth, progress timeout 150 s, completion timeout 150 s per
// GiB, no auto-converge or post-copy. bandwidth, when set, caps it.
func migrationOptions(bandwidth string) (migration.Options, error) {
	o := migration.Options{ProgressTimeout: 150, CompletionTimeoutPerGiB: 150}
	if bandwidth != "" {
		q, err := resource.ParseQuantity(bandwidth)
		if err != nil || q.Sign() <= 0 {
			return o, fmt.Errorf("--migration-bandwidth %q: want a quantity of bytes per second such as 64Mi", bandwidth)
		}
		o.Bandwidth = q
	}
	return o, nil
}

// findSource finds the running VM that --migrate-from names and checks
// that this machine can migrate it. Its VMI is what the new run takes over.
func findSource(cfg Config) (*runrecord.Entry, error) {
	entries, err := runrecord.List(cfg.RecordDir)
	if err != nil {
		return nil, fmt.Errorf("--migrate-from: %w", err)
	}
	e, err := runrecord.Match(entries, cfg.MigrateFrom, "")
	if err != nil {
		return nil, fmt.Errorf("--migrate-from: %w", err)
	}
	if err := migratable(&e.Record); err != nil {
		return nil, fmt.Errorf("--migrate-from %s: %w", e.FullName(), err)
	}
	return e, nil
}

// migratable says why a running VM cannot move to another run, nil when
// it can. What is refused is what this first stage does not carry over.
func migratable(rec *runrecord.Record) error {
	switch {
	case rec.Started.IsZero() || rec.VMI == nil:
		return errors.New("its guest is not running yet")
	case rec.Control == "":
		return errors.New("its vlctl run takes no requests (started by an older vlctl)")
	case len(rec.Grants) > 0 && rec.Volumes == nil && hasClaims(rec.VMI):
		return errors.New("its run did not record its --volume mappings (started by an older vlctl)")
	}
	v := rec.VMI
	for _, vs := range v.Status.VolumeStatus {
		if vs.HotplugVolume != nil {
			return fmt.Errorf("volume %s was plugged in while it ran: not supported yet", vs.Name)
		}
	}
	for i, iface := range v.Spec.Domain.Devices.Interfaces {
		if iface.Bridge != nil {
			return fmt.Errorf("spec.domain.devices.interfaces[%d] (%s): the bridge binding gives the guest the pod's own address, which the target pod does not have (KubeVirt refuses it too); use masquerade", i, iface.Name)
		}
	}
	if n := len(v.Spec.Networks); n > 1 {
		return fmt.Errorf("spec.networks: %d networks; only the pod network moves with the guest yet", n)
	}
	return nil
}

// sourceImages are the pulled images the running VM's disks are backed
// with, which must still be in the cache.
func sourceImages(src *runrecord.Entry) (map[string]string, error) {
	for ref, p := range src.Images {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--migrate-from %s: image %s: its pulled file is gone from the cache: %w", src.FullName(), strings.ReplaceAll(ref, "\x00", " "), err)
		}
	}
	return src.Images, nil
}

// hasClaims: the VMI has a persistentVolumeClaim or dataVolume, which a run
// maps to a local file with --volume.
func hasClaims(v *v1.VirtualMachineInstance) bool {
	for _, vol := range v.Spec.Volumes {
		if vol.PersistentVolumeClaim != nil || vol.DataVolume != nil || (vol.Ephemeral != nil && vol.Ephemeral.PersistentVolumeClaim != nil) {
			return true
		}
	}
	return false
}

// sourceHostDirs are the directories of v's hostDisks.
func sourceHostDirs(v *v1.VirtualMachineInstance) []string {
	if v == nil {
		return nil
	}
	var dirs []string
	for _, vol := range v.Spec.Volumes {
		if vol.HostDisk != nil && filepath.IsAbs(vol.HostDisk.Path) {
			dirs = append(dirs, filepath.Dir(vol.HostDisk.Path))
		}
	}
	return dirs
}

// hasUserStorage: the VMI has storage of the host's that both runs use
// (claims mapped with --volume, hostDisks).
func hasUserStorage(v *v1.VirtualMachineInstance) bool {
	if hasClaims(v) {
		return true
	}
	for _, vol := range v.Spec.Volumes {
		if vol.HostDisk != nil {
			return true
		}
	}
	return false
}

// migrationVMI is the VMI as virt-handler has it once migration uid is
// under way: a block migration (the pod's disks are its own) over unix
// sockets. The user's storage is the same file for both runs, so a
// hostDisk is shared, as a persistentVolumeClaim is: never copied (a copy
// would write the file onto itself while the guest runs).
func migrationVMI(v *v1.VirtualMachineInstance, uid, sourcePod, targetPod string) *v1.VirtualMachineInstance {
	m := v.DeepCopy()
	for i := range m.Spec.Volumes {
		if hd := m.Spec.Volumes[i].HostDisk; hd != nil {
			shared := true
			hd.Shared = &shared
		}
	}
	m.Status.Phase = v1.Running
	m.Status.MigrationMethod = v1.BlockMigration
	m.Status.MigrationTransport = v1.MigrationTransportUnix
	m.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: k8stypes.UID(uid), SourcePod: sourcePod, TargetPod: targetPod}
	return m
}

// bootVMI is v as a fresh boot wants it: without what migrationVMI added
// for a migration (its state, method and transport, the phase).
func bootVMI(v *v1.VirtualMachineInstance) *v1.VirtualMachineInstance {
	b := v.DeepCopy()
	b.Status.Phase = ""
	b.Status.MigrationMethod = ""
	b.Status.MigrationTransport = ""
	b.Status.MigrationState = nil
	return b
}

// podName names a run's pod in the migration state: its vlctl's pid.
func podName(pid int) string { return "vlctl-" + strconv.Itoa(pid) }

// migrateIn takes the source's guest over: the launcher becomes the
// migration's target, the source run is asked to migrate to it, and the
// migration is finalized once it has completed. On failure the source's
// guest runs on where it was.
func (r *runner) migrateIn(ctx context.Context, c *cmdclient.Client, src *runrecord.Entry) error {
	uid := uuid.NewString()
	mv := migrationVMI(r.vmi, uid, podName(src.PID), podName(os.Getpid()))
	r.progress("migrating %s from its run (pid %d): migration %s", src.FullName(), src.PID, uid)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := c.SyncMigrationTarget(sctx, mv, cmdclient.HandlerSyncOptions())
	cancel()
	if err != nil {
		return r.withLauncherLog(fmt.Errorf("prepare the migration target: %w", err))
	}
	t0 := time.Now()
	rep, err := runctl.AskMigration(ctx, src.Control, runctl.Migrate{Target: r.workDir, Migration: uid, Bandwidth: r.cfg.MigrationBandwidth}, len(r.cfg.Publish), migrateRequestLimit)
	if err != nil {
		return fmt.Errorf("migration from %s (pid %d) failed; its guest runs on there: %w", src.FullName(), src.PID, err)
	}
	// The published ports' listeners came with the answer: until served
	// (below) they queue what connects; dropped, they are let go.
	files := rep.Files
	defer func() { runctl.CloseFiles(files) }()
	if rep.Dropped != nil {
		fmt.Fprintf(r.cfg.Status, "vlctl: warning: published ports handed over: %v; closed them (the ports are bound afresh)\n", rep.Dropped)
	}
	msg := rep.Message
	// Completed, even when interrupted meanwhile (the cancel came too
	// late): the guest is this run's now, and the steps below are not
	// cut short by ctx; an interrupted run then shuts it down gracefully
	// as any run does, and its clean-up is the VM's last.
	r.started = true
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := getDomain(context.Background(), c)
		if err == nil && domainState(d) == domainjson.StatusRunning {
			break
		}
		if time.Now().After(deadline) {
			return r.withLauncherLog(fmt.Errorf("the migration completed but the guest does not run here (%s, %v)", domainState(d), err))
		}
		time.Sleep(100 * time.Millisecond)
	}
	fctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = c.FinalizeMigration(fctx, mv, nil)
	cancel()
	if err != nil {
		// What it does (the guest's clock, its links) is worth less
		// than the running guest: go on, saying so.
		fmt.Fprintf(r.cfg.Status, "vlctl: warning: finalize the migration: %v\n", err)
	}
	r.vmi = mv
	r.progress("migrated in %v (%s)", time.Since(t0).Round(time.Millisecond), msg)
	r.guestNet.Adopt(rep.Ports, files)
	files = nil
	return nil
}

// replyMigrated answers the run the guest went to, handing it this run's
// published listeners with the answer (SCM_RIGHTS), which it serves from
// then on. Once they are sent, this run closes its own: the in-flight
// message holds the sockets until the new run takes them, so they stay
// bound all along. Were they not sent, they stay here until the run ends.
func (r *runner) replyMigrated(conn *net.UnixConn, rep runctl.Reply) error {
	var fds []int
	if h := r.cfg.ports; h != nil {
		// The guest left this pod: what connects before the listeners
		// are closed here is closed at once.
		h.Unpoint()
		var err error
		if fds, rep.Ports, err = h.DupListeners(r.cfg.Publish); err != nil {
			fmt.Fprintf(r.cfg.Status, "vlctl: warning: hand the published ports over: %v (the new run binds them when this one ends)\n", err)
		}
		defer guestnet.CloseFDs(fds)
	}
	sent, err := runctl.WriteReply(conn, rep, fds)
	if sent && len(rep.Ports) > 0 {
		// They went with the answer's first byte.
		r.cfg.ports.Release(r.cfg.Publish, rep.Ports)
		fmt.Fprintf(r.cfg.Status, "vlctl: published ports handed over to the new run: %s\n", strings.Join(rep.Ports, ", "))
	}
	if err != nil {
		return fmt.Errorf("answer the run the guest went to: %w", err)
	}
	return nil
}

// serveMigrate serves a migrate request on the control connection conn,
// from the target run's vlctl (targetPID): its processes serve the target
// pod's sockets. The target withdraws the request by closing its side of
// conn (or by ending), which cancels the migration.
func (r *runner) serveMigrate(ctx context.Context, c *cmdclient.Client, conn net.Conn, req runctl.Migrate, targetPID int) (string, error) {
	conn.SetDeadline(time.Now().Add(migrateRequestLimit))
	ctx, cancel := context.WithTimeout(ctx, migrateRequestLimit-5*time.Second)
	defer cancel()
	return r.migrateOut(ctx, c, req, targetPID, runctl.Withdrawn(conn))
}

// migrateOut migrates the guest to the run that asked (targetPID, its
// vlctl) whose work dir is req.Target: it opens the proxies in this pod,
// starts the migration and waits for its end. A completed migration hands
// the guest over; this run then ends when it sees its domain Migrated.
// When the requester withdraws (withdrawn closes), ctx ends or the limit
// passes first, the migration is cancelled, as virt-handler cancels one
// whose target went away, and the guest runs on here.
func (r *runner) migrateOut(ctx context.Context, c *cmdclient.Client, req runctl.Migrate, targetPID int, withdrawn <-chan struct{}) (string, error) {
	if err := r.away.begin(); err != nil {
		return "", err
	}
	target := filepath.Clean(req.Target)
	if !filepath.IsAbs(req.Target) || target != req.Target || target == r.workDir {
		return "", fmt.Errorf("target work dir %q: not another run's clean absolute path", req.Target)
	}
	if _, err := uuid.Parse(req.Migration); err != nil {
		return "", fmt.Errorf("migration uid %q: %w", req.Migration, err)
	}
	o, err := migrationOptions(req.Bandwidth)
	if err != nil {
		return "", err
	}
	// libvirt refuses to leave a disk uncopied unless it finds it on a
	// network file system ("Migration without shared storage is unsafe"):
	// it cannot know that both ends are on this machine, where the user's
	// files are the very same for both QEMUs (one page cache; the source
	// flushes and lets go of them at the switch-over before the target
	// takes them). KubeVirt's UnsafeMigration option says so.
	o.UnsafeMigration = hasUserStorage(r.vmi)
	streams, err := r.openMigrationProxies(layout.Under(target), targetPID)
	if err != nil {
		return "", err
	}
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	mv := migrationVMI(r.vmi, req.Migration, podName(os.Getpid()), podName(targetPID))
	fmt.Fprintf(r.cfg.Status, "vlctl: migrating the guest to the run of pid %d (%s)\n", targetPID, target)
	mctx, cancel := context.WithTimeout(ctx, migrationTimeout)
	defer cancel()
	r.away.leaving.Store(true)
	t0 := time.Now()
	if err := c.Migrate(mctx, mv, o); err != nil {
		r.away.leaving.Store(false)
		return "", fmt.Errorf("start the migration: %w", err)
	}
	wctx, stopWait := context.WithCancel(mctx)
	defer stopWait()
	go func() {
		select {
		case <-withdrawn:
			stopWait()
		case <-wctx.Done():
		}
	}()
	m, err := r.waitMigrationEnd(wctx, c, req.Migration)
	if err != nil {
		why := "the target run withdrew"
		if ctx.Err() != nil {
			why = "interrupted"
		} else if mctx.Err() != nil {
			why = "the migration took more than " + migrationTimeout.String()
		}
		fmt.Fprintf(r.cfg.Status, "vlctl: %s: cancelling the migration\n", why)
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if cerr := c.CancelMigration(cctx, mv); cerr != nil {
			r.log.Warn("cancel the migration", "reason", cerr.Error())
		}
		m, err = r.waitMigrationEnd(cctx, c, req.Migration)
	}
	if err == nil && m != nil && m.Failed {
		err = fmt.Errorf("the migration failed: %s", m.FailureReason)
	}
	if err != nil {
		r.away.leaving.Store(false)
		fmt.Fprintf(r.cfg.Status, "vlctl: %v; the guest runs on here\n", err)
		return "", err
	}
	r.away.to = fmt.Sprintf("the run of pid %d", targetPID)
	return fmt.Sprintf("the source's side took %v", time.Since(t0).Round(time.Millisecond)), nil
}

// waitMigrationEnd polls the launcher's Domain until migration uid has
// ended and returns its metadata; nil when the domain went away first,
// which a completed migration does (the source's domain is transient: it
// goes with the guest, and the launcher may end after it). A migration
// that fails leaves the domain, running, with the failure in its metadata.
func (r *runner) waitMigrationEnd(ctx context.Context, c *cmdclient.Client, uid string) (*domainjson.MigrationMetadata, error) {
	for {
		d, err := getDomain(ctx, c)
		switch {
		case err == nil && d == nil:
			return nil, nil
		case err == nil:
			if m := d.Spec.Metadata.KubeVirt.Migration; m != nil && string(m.UID) == uid && m.EndTimestamp != nil {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the migration did not end: %w", ctx.Err())
		case <-r.pod.monitor.Done():
			if err := r.pod.monitor.Err(); err != nil {
				return nil, fmt.Errorf("the launcher ended during the migration: %w", err)
			}
			return nil, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openMigrationProxies opens, in this pod's migration proxy directory, the
// sockets the source's libvirt and QEMU connect to, each leading to the
// target pod's socket (target, as root sees it) of the same name. The
// target pod's directories belong to its user, so who serves each socket
// is checked at every connection: a process of the target run (below
// targetPID), never whatever that user put at the path.
func (r *runner) openMigrationProxies(target layout.Layout, targetPID int) ([]*migrationproxy.Stream, error) {
	uid := string(r.vmi.UID)
	dir, err := r.rel(r.layout.MigrationProxyDir())
	if err != nil {
		return nil, err
	}
	if err := r.dir.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("migration proxy directory: %w", err)
	}
	targets := map[int]string{
		0:                          filepath.Join(target.LibvirtRunDir, "libvirt", "virtqemud-sock"),
		layout.DirectMigrationPort: target.MigrationSocket(uid, layout.DirectMigrationPort),
		layout.BlockMigrationPort:  target.MigrationSocket(uid, layout.BlockMigrationPort),
	}
	var streams []*migrationproxy.Stream
	for port, to := range targets {
		name, err := r.rel(r.layout.MigrationSocket(uid, port))
		if err == nil {
			var ln *net.UnixListener
			if ln, err = r.dir.ListenUnix(name, r.owner.UID, r.owner.GID); err == nil {
				dial := func() (net.Conn, error) { return dialRunSocket(to, targetPID) }
				remove := func() error { return r.dir.Remove(name) }
				var s *migrationproxy.Stream
				if s, err = migrationproxy.Serve(ln, r.dir.Join(name), to, dial, remove, r.log); err == nil {
					streams = append(streams, s)
					continue
				}
			}
		}
		for _, s := range streams {
			s.Close()
		}
		return nil, fmt.Errorf("migration proxy to %s: %w", to, err)
	}
	return streams, nil
}

// dialRunSocket connects to path and checks that a process of the run of
// pid serves it.
func dialRunSocket(path string, pid int) (net.Conn, error) {
	conn, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := unixgrpc.PeerBelow(conn, pid, fmt.Sprintf("the target run (pid %d)", pid)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return conn, nil
}

// handedOverRoot empties the work dir of a run whose guest went to another
// run and keeps the directory itself: the target's launcher sees its own
// pod at this path (a bind mount in its mount namespace), and removing the
// directory would take that mount away. The last run of the VM removes it.
func handedOverRoot(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		// RemoveAll does not follow links below dir, whose parent only
		// root can change.
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeLauncherRoot removes the first run's work dir that this run's
// launcher saw its own at, once no run of the VM uses it: it is empty
// and root's (handedOverRoot), in a work root only root can write.
// It reports whether there was one to remove.
func removeLauncherRoot(dir string) (bool, error) {
	err := os.Remove(dir)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case errors.Is(err, syscall.ENOTEMPTY):
		return false, fmt.Errorf("%s is not empty: left alone", dir)
	}
	return false, err
}
