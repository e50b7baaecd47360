package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domain/devices"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// jobs runs the manager's long jobs on its domain, outside the operation
// lock: backups (backup.go) and memory dumps (memorydump.go). Their
// records are in the metadata; each change is sent (refresh).
type jobs struct {
	// rec holds the backup's and the memory dump's records (and the
	// migration's, which a backup waits for, and the CBT overlays').
	rec  *record
	find finder
	log  *slog.Logger
	// hotplugDir is where virt-handler mounts the volumes the jobs
	// write to; socketsDir has the pull-mode backup's NBD socket.
	hotplugDir, socketsDir string
	// quiesce freezes the guest's file systems around a backup
	// (agent.Guest).
	quiesce quiescer
	// refresh re-reads the domain and sends it (watcher.refresh).
	refresh func(ctx context.Context, typ string, emit bool)

	// dumping: a memory dump call runs in the daemon (memorydump.go,
	// rec.mu).
	dumping bool
}

// quiescer freezes and thaws the guest's file systems (agent.Guest).
type quiescer interface {
	Freeze(ctx context.Context, v *v1.VirtualMachineInstance, unfreezeTimeout time.Duration) error
	Unfreeze(ctx context.Context, v *v1.VirtualMachineInstance) error
}

// Backups (BackupVirtualMachine) run as KubeVirt v1.9's launcher runs
// them: libvirt's backup job over the disks on changed block tracking
// overlays (disks.cbtOverlay), each backup also creating a checkpoint
// (a persistent bitmap in every overlay) named <backupName>-<start time>,
// from which the next incremental backup copies only what changed. Push
// mode writes <backupName>-<volume>.qcow2 files into
// <targetPath>/<vmi name>/<backupName>-<start time>; pull mode serves the
// disks over NBD on a unix socket for virt-handler's export. The RPC
// starts the job and answers; its end and outcome go into the Domain's
// backup metadata, which virt-handler reads, as the memory dump's do.

// errBackupNotEnabled is KubeVirt's refusal of a backup without CBT, word
// for word.
var errBackupNotEnabled = errors.New("Backup failed ChangedBlockTracking is not enabled")

// backupTimeFormat is how KubeVirt writes the start time in the
// checkpoint's and the backup directory's names.
const backupTimeFormat = "2006-01-02_15-04-05"

// backupSocketName is the pull mode's NBD socket in the pod's sockets
// directory (KubeVirt's backup-nbd-sock).
const backupSocketName = "backup-nbd-sock"

// backupCallTimeout bounds each libvirt call of a backup; backupPoll is
// how often a running backup job is looked at.
const (
	backupCallTimeout = 30 * time.Second
	backupPoll        = 500 * time.Millisecond
)

// checkBackupOptions refuses a request virt-handler would never send,
// naming the field. hotplugDir is where virt-handler mounts the backup
// target volume (targetPath is one volume's directory there).
func checkBackupOptions(o *backupv1.BackupOptions, hotplugDir string) error {
	switch o.Cmd {
	case backupv1.Start:
	case backupv1.Abort:
		if o.BackupName == "" {
			return errors.New("backupName: must be set")
		}
		return nil
	case backupv1.Export:
		return errors.New("cmd Export: the pull-mode backup export tunnel is not supported")
	default:
		return fmt.Errorf("cmd %q: must be Start, Abort or Export", o.Cmd)
	}
	if err := layout.CheckName(o.BackupName); err != nil {
		return fmt.Errorf("backupName: %w", err)
	}
	if o.BackupStartTime == nil {
		return errors.New("backupStartTime: must be set")
	}
	switch o.Mode {
	case backupv1.PushMode, backupv1.PullMode:
	default:
		return fmt.Errorf("mode %q: must be Push or Pull", o.Mode)
	}
	if o.TargetPath == nil {
		return errors.New("targetPath: must be set")
	}
	if _, err := backupVolume(hotplugDir, *o.TargetPath); err != nil {
		return err
	}
	if o.Incremental != nil && *o.Incremental != "" {
		if err := layout.CheckName(*o.Incremental); err != nil {
			return fmt.Errorf("incremental: %w", err)
		}
	}
	return nil
}

// backupVolume checks targetPath, a volume's directory directly below the
// hotplug disk directory (where virt-handler mounts the backup target
// volume), and returns the volume's name.
func backupVolume(hotplugDir, p string) (string, error) {
	bad := func(why string) error { return fmt.Errorf("targetPath %q: %s", p, why) }
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", bad("must be an absolute path without . or .. elements")
	}
	rel, err := filepath.Rel(hotplugDir, p)
	if err != nil || strings.Contains(rel, "/") || layout.CheckName(rel) != nil {
		return "", bad("must be a volume's directory directly under " + hotplugDir)
	}
	return rel, nil
}

// checkpointName is the checkpoint a backup creates.
func checkpointName(o *backupv1.BackupOptions) string {
	return o.BackupName + "-" + o.BackupStartTime.UTC().Format(backupTimeFormat)
}

// startBackup decides a Start request against the last backup's record:
// the same backup (name and start time) running is nothing to do; the
// same one ended, or another one running, is refused; otherwise a new
// record.
func startBackup(last *domainjson.BackupMetadata, o *backupv1.BackupOptions) (*domainjson.BackupMetadata, bool, error) {
	if last != nil && last.Name != "" {
		same := last.Name == o.BackupName && last.StartTimestamp != nil && o.BackupStartTime != nil &&
			last.StartTimestamp.Equal(o.BackupStartTime)
		switch {
		case same && last.EndTimestamp == nil:
			return last, false, nil
		case same:
			return last, false, fmt.Errorf("backup %s that started at %s already executed, finished at %s, completed: %t",
				o.BackupName, last.StartTimestamp.UTC().Format(time.RFC3339), last.EndTimestamp.UTC().Format(time.RFC3339), last.Completed)
		case last.EndTimestamp == nil:
			return last, false, fmt.Errorf("backup %s already in progress, need to wait for completion", last.Name)
		}
	}
	return &domainjson.BackupMetadata{Name: o.BackupName, StartTimestamp: o.BackupStartTime.DeepCopy(),
		SkipQuiesce: o.SkipQuiesce, Mode: string(o.Mode)}, true, nil
}

// checkAbort refuses an Abort that is not for the backup running.
func checkAbort(last *domainjson.BackupMetadata, o *backupv1.BackupOptions) error {
	switch {
	case last == nil || last.Name == "":
		return errors.New("failed to abort backup: could not find ongoing backup")
	case last.StartTimestamp == nil:
		return errors.New("failed to abort backup: backup did not start yet")
	case last.Name != o.BackupName || (o.BackupStartTime != nil && !last.StartTimestamp.Equal(o.BackupStartTime)):
		return errors.New("failed to abort backup: requested backup differs from ongoing one")
	case last.Completed:
		return errors.New("failed to abort backup: backup already completed")
	}
	return nil
}

// backupDisk is one disk of the domain as a backup sees it.
type backupDisk struct {
	target, volume string
	tracked        bool // on a CBT overlay
}

// backupDisks lists the domain's disks: the ones on an overlay of
// dataFiles are backed up, the others are not.
func backupDisks(live *libvirtxml.Domain, dataFiles map[string]string) []backupDisk {
	var out []backupDisk
	for _, d := range live.Devices.Disks {
		if d.Target == nil || d.Target.Dev == "" {
			continue
		}
		bd := backupDisk{target: d.Target.Dev}
		if d.Alias != nil {
			bd.volume = strings.TrimPrefix(d.Alias.Name, "ua-")
		}
		if s := d.Source; s != nil && s.File != nil {
			_, bd.tracked = dataFiles[s.File.File]
		}
		out = append(out, bd)
	}
	return out
}

// backupXML is the backup job's and the checkpoint's definitions for the
// disks, as KubeVirt writes them: tracked disks backed up (push: a qcow2
// target file each in dir; pull: an NBD export named after the volume,
// its scratch file in dir), the others not; the checkpoint covers the
// tracked disks with a bitmap.
func backupXML(disks []backupDisk, o *backupv1.BackupOptions, dir, socket string) (*libvirtxml.DomainBackup, *libvirtxml.DomainCheckpoint, []backupv1.BackupVolumeInfo) {
	cp := checkpointName(o)
	b := &libvirtxml.DomainBackup{}
	if o.Incremental != nil {
		b.Incremental = *o.Incremental
	}
	c := &libvirtxml.DomainCheckpoint{Name: cp, Disks: &libvirtxml.DomainCheckpointDisks{}}
	var push libvirtxml.DomainBackupPushDisks
	var pull libvirtxml.DomainBackupPullDisks
	var vols []backupv1.BackupVolumeInfo
	for _, d := range disks {
		if !d.tracked {
			push.Disks = append(push.Disks, libvirtxml.DomainBackupPushDisk{Name: d.target, Backup: "no"})
			pull.Disks = append(pull.Disks, libvirtxml.DomainBackupPullDisk{Name: d.target, Backup: "no"})
			c.Disks.Disks = append(c.Disks.Disks, libvirtxml.DomainCheckpointDisk{Name: d.target, Checkpoint: "no"})
			continue
		}
		file := &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{
			File: filepath.Join(dir, o.BackupName+"-"+d.volume+".qcow2")}}
		qcow2 := &libvirtxml.DomainBackupDiskDriver{Type: "qcow2"}
		push.Disks = append(push.Disks, libvirtxml.DomainBackupPushDisk{Name: d.target, Backup: "yes", Driver: qcow2, Target: file})
		pull.Disks = append(pull.Disks, libvirtxml.DomainBackupPullDisk{Name: d.target, Backup: "yes",
			ExportName: d.volume, ExportBitmap: cp, Driver: qcow2, Scratch: file})
		c.Disks.Disks = append(c.Disks.Disks, libvirtxml.DomainCheckpointDisk{Name: d.target, Checkpoint: "bitmap"})
		vols = append(vols, backupv1.BackupVolumeInfo{VolumeName: d.volume, DiskTarget: d.target})
	}
	if o.Mode == backupv1.PullMode {
		b.Pull = &libvirtxml.DomainBackupPull{Disks: &pull,
			Server: &libvirtxml.DomainBackupPullServer{UNIX: &libvirtxml.DomainBackupPullServerUNIX{Socket: socket}}}
	} else {
		b.Push = &libvirtxml.DomainBackupPush{Disks: &push}
	}
	return b, c, vols
}

// backupDir is where a backup's files go below the target volume's
// directory: <vmi name>/<backupName>-<start time>.
func backupDir(o *backupv1.BackupOptions, vmiName string) (rel []string) {
	return []string{vmiName, checkpointName(o)}
}

// jobEnd is the outcome of an ended backup job as libvirt gives it.
type jobEnd struct {
	typ    libvirt.DomainJobType
	errmsg string
}

// operationCanceled is libvirt's message for a job aborted on request.
const operationCanceled = "Operation canceled"

// endBackup is the record of the backup once its job ended as end says,
// as KubeVirt records it: a cancelled push backup failed ("backup
// aborted"), a cancelled pull backup (its export done) did not; libvirt's
// error message is kept, but for a pull backup's "Operation canceled".
func endBackup(cur *domainjson.BackupMetadata, end jobEnd, now time.Time) *domainjson.BackupMetadata {
	if cur == nil || cur.EndTimestamp != nil {
		return cur
	}
	next := *cur
	pull := cur.Mode == string(backupv1.PullMode)
	var failed bool
	var msg string
	switch end.typ {
	case libvirt.DomainJobCompleted:
	case libvirt.DomainJobCancelled:
		failed = !pull
		if failed {
			msg = "backup aborted"
		}
	case libvirt.DomainJobFailed:
		failed = true
	default:
		failed, msg = true, fmt.Sprintf("unexpected job completion type: %d", end.typ)
	}
	if end.errmsg != "" && !(pull && end.errmsg == operationCanceled) {
		if msg == "" {
			msg = end.errmsg
		} else {
			msg += ": " + end.errmsg
		}
	}
	if failed && msg == "" {
		msg = "unknown failure reason"
	}
	t := metav1.NewTime(now)
	next.Failed, next.Completed, next.EndTimestamp = failed, true, &t
	if msg != "" || failed {
		next.BackupMsg = msg
	}
	return &next
}

// Backup runs a BackupVirtualMachine command: Start a backup, Abort the
// running one. Refusals name the field.
func (m *Manager) Backup(ctx context.Context, v *v1.VirtualMachineInstance, o *backupv1.BackupOptions) error {
	if !vmi.CBTActive(v) {
		return errBackupNotEnabled
	}
	if err := checkBackupOptions(o, m.cfg.Layout.HotplugDiskDir); err != nil {
		return err
	}
	if err := m.op.lock(ctx); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer m.op.unlock()
	if err := m.checkIdentity(v, false); err != nil {
		return err
	}
	if o.Cmd == backupv1.Abort {
		return m.jobs.abortBackup(ctx, o)
	}
	return m.jobs.beginBackup(ctx, v, o)
}

func (x *jobs) beginBackup(ctx context.Context, v *v1.VirtualMachineInstance, o *backupv1.BackupOptions) (err error) {
	x.rec.mu.Lock()
	if mig := x.rec.md.Migration; mig != nil && mig.EndTimestamp == nil {
		x.rec.mu.Unlock()
		return errors.New("failed to do backup, VMI is currently during migration")
	}
	rec, start, err := startBackup(x.rec.md.Backup, o)
	if err != nil || !start {
		x.rec.mu.Unlock()
		if err == nil {
			x.log.Info("backup already in progress", "backup", o.BackupName)
		}
		return err
	}
	dataFiles := x.rec.md.DataFiles
	x.rec.mu.Unlock()

	l, d, ok, err := x.find.lookup(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if !ok {
		return errors.New("backup: no domain is defined")
	}
	cctx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	live, err := devices.ReadXML(cctx, l, d, 0)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	disks := backupDisks(live, dataFiles)
	vol, _ := backupVolume(x.hotplugDir, *o.TargetPath)
	rel := backupDir(o, v.Name)
	dir := filepath.Join(append([]string{*o.TargetPath}, rel...)...)
	b, c, vols := backupXML(disks, o, dir, filepath.Join(x.socketsDir, backupSocketName))
	if len(vols) == 0 {
		return errors.New("backup: no disk of the domain is on a changed block tracking overlay")
	}
	removeDir, err := x.makeBackupDir(vol, rel)
	if err != nil {
		return fmt.Errorf("backup: directory %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			removeDir()
		}
	}()
	bx, err := b.Marshal()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	cx, err := c.Marshal()
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	volsJSON, err := json.Marshal(vols)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	rec.CheckpointName, rec.Volumes = c.Name, string(volsJSON)
	rec.QuiesceStatus = string(backupv1.QuiesceSkipped)
	if !o.SkipQuiesce {
		rec.QuiesceStatus = string(backupv1.QuiesceSucceeded)
		if ferr := x.quiesce.Freeze(ctx, v, 0); ferr != nil {
			x.log.Warn("backup: freezing the guest's file systems failed, backing up unfrozen", "reason", ferr.Error())
			rec.QuiesceStatus, rec.BackupMsg = string(backupv1.QuiesceFailed), ferr.Error()
		} else {
			defer func() {
				if uerr := x.quiesce.Unfreeze(context.WithoutCancel(ctx), v); uerr != nil {
					x.log.Error("backup: thawing the guest's file systems failed", "reason", uerr.Error())
				}
			}()
		}
	}
	x.rec.mu.Lock()
	x.rec.md.Backup = rec
	bg := x.rec.runContextLocked()
	x.rec.mu.Unlock()
	x.log.Info("backup starting", "backup", o.BackupName, "mode", o.Mode, "checkpoint", c.Name,
		"incrementalFrom", b.Incremental, "dir", dir)
	cctx2, cancel2 := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel2()
	err = bounded.Call(cctx2, "begin the backup job", func() error {
		return l.DomainBackupBegin(d, bx, libvirt.OptString{cx}, 0)
	})
	if err != nil {
		x.rec.mu.Lock()
		x.rec.md.Backup = nil
		x.rec.mu.Unlock()
		x.refresh(ctx, EventModified, true)
		return fmt.Errorf("backup %s: %w", o.BackupName, err)
	}
	x.refresh(ctx, EventModified, true)
	go x.watchBackup(bg, l, d, o.BackupName)
	return nil
}

// makeBackupDir makes the backup's directory below the target volume's
// (no link followed) and returns what removes it again.
func (x *jobs) makeBackupDir(vol string, rel []string) (func(), error) {
	hot, err := safefs.Open(x.hotplugDir)
	if err != nil {
		return nil, err
	}
	defer hot.Close()
	dir, err := hot.OpenDir(vol)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	if err := dir.MkdirAll(filepath.Join(rel...), 0o750); err != nil {
		return nil, err
	}
	return func() {
		if err := x.removeBackupDir(vol, rel); err != nil {
			x.log.Warn("backup: removing the failed backup's directory", "reason", err.Error())
		}
	}, nil
}

// removeBackupDir removes the backup's directory and what is in it.
func (x *jobs) removeBackupDir(vol string, rel []string) error {
	hot, err := safefs.Open(x.hotplugDir)
	if err != nil {
		return err
	}
	defer hot.Close()
	dir, err := hot.OpenDir(vol)
	if err != nil {
		return err
	}
	defer dir.Close()
	leaf, err := dir.OpenDir(filepath.Join(rel...))
	if err != nil {
		return err
	}
	defer leaf.Close()
	f, err := leaf.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := leaf.Remove(n); err != nil {
			return err
		}
	}
	return dir.Remove(filepath.Join(rel...))
}

// watchBackup follows the backup job until it ends and records its end.
// bg is the manager's lifetime: the job outlives the RPC that began it.
func (x *jobs) watchBackup(bg context.Context, l *libvirt.Libvirt, d libvirt.Domain, name string) {
	tick := time.NewTicker(backupPoll)
	defer tick.Stop()
	for {
		select {
		case <-bg.Done():
			return
		case <-l.Disconnected():
			x.backupEnded(bg, name, jobEnd{typ: libvirt.DomainJobFailed, errmsg: "the connection to libvirt was lost while the backup ran"})
			return
		case <-tick.C:
		}
		end, done, err := backupJobEnd(bg, l, d)
		if err != nil {
			x.log.Warn("backup: reading the job's state", "backup", name, "reason", err.Error())
			continue
		}
		if done {
			x.backupEnded(bg, name, end)
			return
		}
	}
}

// backupJobEnd tells whether the domain's backup job has ended, and how.
func backupJobEnd(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) (jobEnd, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	var typ int32
	if err := bounded.Call(ctx, "read the job's state", func() (err error) {
		typ, _, err = l.DomainGetJobStats(d, 0)
		return err
	}); err != nil {
		return jobEnd{}, false, err
	}
	if libvirt.DomainJobType(typ) != libvirt.DomainJobNone {
		return jobEnd{}, false, nil
	}
	var params []libvirt.TypedParam
	if err := bounded.Call(ctx, "read the ended job's statistics", func() (err error) {
		typ, params, err = l.DomainGetJobStats(d, libvirt.DomainJobStatsCompleted)
		return err
	}); err != nil {
		return jobEnd{}, false, err
	}
	end := jobEnd{typ: libvirt.DomainJobType(typ)}
	for _, p := range params {
		if s, ok := p.Value.I.(string); ok && p.Field == "errmsg" {
			end.errmsg = s
		}
	}
	return end, true, nil
}

// backupEnded records the end of backup name and tells virt-handler.
func (x *jobs) backupEnded(bg context.Context, name string, end jobEnd) {
	x.rec.mu.Lock()
	cur := x.rec.md.Backup
	if cur == nil || cur.Name != name {
		x.rec.mu.Unlock()
		return
	}
	next := endBackup(cur, end, time.Now())
	x.rec.md.Backup = next
	x.rec.mu.Unlock()
	if next.Failed {
		x.log.Error("backup failed", "backup", name, "reason", next.BackupMsg)
	} else {
		x.log.Info("backup completed", "backup", name, "message", next.BackupMsg)
	}
	ctx, cancel := context.WithTimeout(bg, refreshWait)
	defer cancel()
	x.refresh(ctx, EventModified, true)
}

// abortBackup aborts the running backup job (libvirt's abort of the
// domain's job, after checking that it is the backup).
func (x *jobs) abortBackup(ctx context.Context, o *backupv1.BackupOptions) error {
	x.rec.mu.Lock()
	err := checkAbort(x.rec.md.Backup, o)
	x.rec.mu.Unlock()
	if err != nil {
		return err
	}
	l, d, ok, err := x.find.lookup(ctx)
	if err != nil || !ok {
		return fmt.Errorf("failed to abort backup: domain not found: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	var typ int32
	var params []libvirt.TypedParam
	if err := bounded.Call(ctx, "read the job's state", func() (err error) {
		typ, params, err = l.DomainGetJobStats(d, 0)
		return err
	}); err != nil {
		return fmt.Errorf("failed to abort backup: %w", err)
	}
	op := int32(-1)
	for _, p := range params {
		if v, ok := p.Value.I.(int32); ok && p.Field == libvirt.DomainJobOperationStr {
			op = v
		}
	}
	if op != int32(libvirt.DomainJobOperationStrBackup) || libvirt.DomainJobType(typ) != libvirt.DomainJobUnbounded {
		return fmt.Errorf("cannot abort backup, wrong operation or type: %d, %d", op, typ)
	}
	if err := bounded.Call(ctx, "abort the backup job", func() error { return l.DomainAbortJob(d) }); err != nil {
		return fmt.Errorf("failed to abort backup: %w", err)
	}
	x.log.Info("backup job abort initiated", "backup", o.BackupName)
	return nil
}
