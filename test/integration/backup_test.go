package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	backupv1 "kubevirt.io/api/backup/v1alpha1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// cbtSerial is the tracked data disk's serial, by which the guest finds it.
const cbtSerial = "cbtdata"

// TestBackupCBT drives changed block tracking and backups as virt-handler
// does for a VM with incremental backup on, against the real daemon and
// guest:
//   - a VMI whose status says CBT Initializing gets its filesystem PVC on
//     a qcow2 overlay (the raw image its data file) and the Domain shows
//     the disk's DataStore, which is what moves virt-handler to Enabled;
//   - a backup while CBT is not Enabled is refused with KubeVirt's words;
//     bad options are refused naming the field;
//   - a full push backup, then the guest writes, then an incremental one
//     from the full one's checkpoint: each recorded completed in the
//     Domain's backup metadata; full+incremental restores to a disk equal
//     to the guest's (guest paused), the full one alone does not;
//   - a new pod on the same overlay and image (the VM restarted): the
//     incremental is refused until the checkpoint is redefined
//     (RedefineCheckpoint), then works and restores to the guest's disk;
//     a checkpoint whose bitmap is not there is answered checkpointInvalid;
//   - a pull backup serves the disk over NBD until it is aborted;
//   - after the launcher dies and its successor takes the guest over, the
//     checkpoint is redefined and the next incremental backup restores
//     to the guest's disk.
func TestBackupCBT(t *testing.T) {
	testenv.Programs(t, "qemu-img", "qemu-storage-daemon")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	p1 := env.NewDeferred(t, "cbt", podOpts{SharedCaps: true})
	dataImage(t, p1, 64<<20)
	p1.Start()
	p1.WaitReady(30 * time.Second)
	c1 := p1.Client(ctx)
	v := cbtVMI(p1, v1.ChangedBlockTrackingInitializing)
	launchertest.Must(t, c1.Sync(ctx, v, nil))
	p1.WaitConsole(testguest.MarkerAgent, bootTimeout)
	waitAgent(t, ctx, c1, p1)
	overlay := filepath.Join(p1.Layout.LibvirtDir(), "qemu", "cbt", "data.qcow2")
	checkDataStore(t, ctx, c1, overlay, p1.Layout.PVCDisk("data"))
	if out, err := exec.Command("qemu-img", "info", "-U", overlay).CombinedOutput(); err != nil || !strings.Contains(string(out), "data file: "+p1.Layout.PVCDisk("data")) {
		t.Fatalf("overlay %s: %v\n%s", overlay, err, out)
	}

	target := filepath.Join(p1.Layout.HotplugDiskDir, "backupvol")
	podDir(t, target, true)
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	full := pushBackup("full", t0, target, "")
	err := c1.Backup(ctx, v, full)
	if err == nil || !strings.Contains(err.Error(), "Backup failed ChangedBlockTracking is not enabled") {
		t.Fatalf("backup with CBT Initializing: %v, want KubeVirt's refusal", err)
	}
	v.Status.ChangedBlockTracking.State = v1.ChangedBlockTrackingEnabled
	badRequests(t, ctx, c1, v, full)

	guestWrite(t, ctx, c1, p1, 10)
	launchertest.Must(t, c1.Backup(ctx, v, full))
	rec := waitBackupEnd(t, ctx, c1, "full")
	if rec.Failed || rec.CheckpointName != "full-2026-12-07_10-00-00" || rec.QuiesceStatus != string(backupv1.QuiesceSucceeded) ||
		!strings.Contains(rec.Volumes, `"volumeName":"data"`) {
		t.Fatalf("full backup record: %+v", rec)
	}
	// The same backup asked again (virt-handler's next reconcile) is
	// refused once it ended, as KubeVirt does.
	if err := c1.Backup(ctx, v, full); err == nil || !strings.Contains(err.Error(), "already executed") {
		t.Errorf("the ended backup asked again: %v", err)
	}
	fullFile := filepath.Join(target, v.Name, "full-2026-12-07_10-00-00", "full-data.qcow2")

	guestWrite(t, ctx, c1, p1, 30)
	inc := pushBackup("inc", t0.Add(time.Hour), target, rec.CheckpointName)
	launchertest.Must(t, c1.Backup(ctx, v, inc))
	irec := waitBackupEnd(t, ctx, c1, "inc")
	if irec.Failed {
		t.Fatalf("incremental backup record: %+v", irec)
	}
	incFile := filepath.Join(target, v.Name, "inc-2026-12-07_11-00-00", "inc-data.qcow2")
	launchertest.Must(t, c1.Pause(ctx, v))
	want := launchertest.SHA256File(t, p1.Layout.PVCDisk("data"))
	if got := restore(t, fullFile); got == want {
		t.Errorf("the full backup alone equals the guest's disk after the second write: the write did not reach the disk")
	}
	if got := restore(t, fullFile, incFile); got != want {
		t.Errorf("full+incremental restores to %s, the guest's disk is %s", got, want)
	}
	launchertest.Must(t, c1.Unpause(ctx, v))
	killAndDelete(t, p1, c1, ctx, v)

	// The VM starts again in a new pod on the same volumes: the overlay
	// (backend storage) with its bitmaps and the image.
	p2 := env.NewDeferred(t, "cbt", podOpts{SharedCaps: true})
	dataImage(t, p2, 0)
	launchertest.Must(t, launchertest.CopyFile(p1.Layout.PVCDisk("data"), p2.Layout.PVCDisk("data")))
	launchertest.Must(t, os.Chown(p2.Layout.PVCDisk("data"), int(env.Cred.Uid), int(env.Cred.Gid)))
	overlay2 := filepath.Join(p2.Layout.LibvirtDir(), "qemu", "cbt", "data.qcow2")
	ownedDir(t, p2, filepath.Dir(overlay2))
	launchertest.Must(t, launchertest.CopyFile(overlay, overlay2))
	launchertest.Must(t, os.Chown(overlay2, int(env.Cred.Uid), int(env.Cred.Gid)))
	p2.Start()
	p2.WaitReady(30 * time.Second)
	c2 := p2.Client(ctx)
	v2 := cbtVMI(p2, v1.ChangedBlockTrackingEnabled)
	launchertest.Must(t, c2.Sync(ctx, v2, nil))
	p2.WaitConsole(testguest.MarkerAgent, bootTimeout)
	waitAgent(t, ctx, c2, p2)
	checkDataStore(t, ctx, c2, overlay2, p2.Layout.PVCDisk("data"))
	target2 := filepath.Join(p2.Layout.HotplugDiskDir, "backupvol")
	podDir(t, target2, true)
	guestWrite(t, ctx, c2, p2, 50)

	early := pushBackup("early", t0.Add(2*time.Hour), target2, irec.CheckpointName)
	if err := c2.Backup(ctx, v2, early); err == nil {
		t.Errorf("an incremental backup before the checkpoint was redefined started")
	} else {
		t.Logf("before the redefinition: %v", err)
	}
	if d, _, err := c2.GetDomain(ctx); err != nil || d.Spec.Metadata.KubeVirt.Backup != nil {
		t.Errorf("a backup that did not start left a record: %+v, %v", d.Spec.Metadata.KubeVirt.Backup, err)
	}
	if _, err := os.Stat(filepath.Join(target2, v2.Name, "early-2026-12-07_12-00-00")); err == nil {
		t.Errorf("a backup that did not start left its directory")
	}

	invalid, err := c2.RedefineCheckpoint(ctx, v2, &backupv1.BackupCheckpoint{Name: "never-2026-01-01_00-00-00"})
	if err == nil || !invalid {
		t.Errorf("redefining a checkpoint no bitmap holds: invalid %v, %v; want checkpointInvalid", invalid, err)
	}
	ct := metav1.NewTime(t0.Add(time.Hour))
	invalid, err = c2.RedefineCheckpoint(ctx, v2, &backupv1.BackupCheckpoint{Name: irec.CheckpointName, CreationTime: &ct,
		Volumes: []backupv1.BackupVolumeInfo{{VolumeName: "data", DiskTarget: "vdd"}}})
	if err != nil || invalid {
		t.Fatalf("redefine %s: invalid %v, %v", irec.CheckpointName, invalid, err)
	}
	inc2 := pushBackup("inc2", t0.Add(3*time.Hour), target2, irec.CheckpointName)
	launchertest.Must(t, c2.Backup(ctx, v2, inc2))
	if r := waitBackupEnd(t, ctx, c2, "inc2"); r.Failed {
		t.Fatalf("incremental backup after the redefinition: %+v", r)
	}
	inc2File := filepath.Join(target2, v2.Name, "inc2-2026-12-07_13-00-00", "inc2-data.qcow2")
	launchertest.Must(t, c2.Pause(ctx, v2))
	want = launchertest.SHA256File(t, p2.Layout.PVCDisk("data"))
	if got := restore(t, fullFile, incFile, inc2File); got != want {
		t.Errorf("full+incremental+incremental restores to %s, the guest's disk is %s", got, want)
	}
	launchertest.Must(t, c2.Unpause(ctx, v2))
	pullBackup(t, ctx, c2, p2, v2, pushBackup("pull", t0.Add(4*time.Hour), target2, ""), want)

	// The launcher dies and its successor takes the guest over: the
	// Domain still shows the DataStore and the last backup's record, the
	// daemon still knows the checkpoints (a redefinition, which
	// virt-handler asks for only after a restart of the VM, succeeds
	// with nothing to do) and the next incremental backup works.
	c3 := restartLauncher(t, ctx, p2)
	checkDataStore(t, ctx, c3, overlay2, p2.Layout.PVCDisk("data"))
	if r := waitBackupEnd(t, ctx, c3, "pull"); r.Failed {
		t.Errorf("the last backup's record after the launcher's restart: %+v", r)
	}
	inc2Checkpoint := "inc2-2026-12-07_13-00-00"
	if invalid, err := c3.RedefineCheckpoint(ctx, v2, &backupv1.BackupCheckpoint{Name: inc2Checkpoint}); err != nil || invalid {
		t.Fatalf("redefine %s after the launcher's restart: invalid %v, %v", inc2Checkpoint, invalid, err)
	}
	waitAgent(t, ctx, c3, p2)
	guestWrite(t, ctx, c3, p2, 5)
	inc3 := pushBackup("inc3", t0.Add(5*time.Hour), target2, inc2Checkpoint)
	launchertest.Must(t, c3.Backup(ctx, v2, inc3))
	if r := waitBackupEnd(t, ctx, c3, "inc3"); r.Failed {
		t.Fatalf("incremental backup after the launcher's restart: %+v", r)
	}
	inc3File := filepath.Join(target2, v2.Name, "inc3-2026-12-07_15-00-00", "inc3-data.qcow2")
	launchertest.Must(t, c3.Pause(ctx, v2))
	want = launchertest.SHA256File(t, p2.Layout.PVCDisk("data"))
	if got := restore(t, fullFile, incFile, inc2File, inc3File); got != want {
		t.Errorf("the chain to the backup after the launcher's restart restores to %s, the guest's disk is %s", got, want)
	}
	launchertest.Must(t, c3.Unpause(ctx, v2))
	killAndDelete(t, p2, c3, ctx, v2)
}

// restartLauncher kills the pod's launcher, as an accident would, and
// returns a client of the one the monitor starts in its place.
func restartLauncher(t *testing.T, ctx context.Context, p *pod) *cmdclient.Client {
	t.Helper()
	old := childNamed(t, p.Cmd.Process.Pid, "virt-launcher")
	launchertest.Must(t, syscall.Kill(old, syscall.SIGKILL))
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pid := childNamedOrZero(p.Cmd.Process.Pid, "virt-launcher"); pid != 0 && pid != old {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			c, err := cmdclient.Dial(dctx, p.Layout.ReadySocket())
			cancel()
			if err == nil {
				t.Cleanup(func() { c.Close() })
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new launcher answering 30 s after the kill:\n%s", launchertest.Tail(p.Stderr.String(), 6000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pullBackup: a pull backup serves the tracked disk over NBD on
// KubeVirt's socket until it is aborted (the disk read there is the
// guest's, want); an Abort of another backup is refused; the Abort ends
// it, recorded completed and not failed (a pull backup ends so).
func pullBackup(t *testing.T, ctx context.Context, c *cmdclient.Client, p *pod, v *v1.VirtualMachineInstance, o *backupv1.BackupOptions, want string) {
	t.Helper()
	o.Mode = backupv1.PullMode
	launchertest.Must(t, c.Backup(ctx, v, o))
	sock := filepath.Join(p.Layout.SocketsDir(), "backup-nbd-sock")
	raw := filepath.Join(t.TempDir(), "pulled.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "raw", "nbd+unix:///data?socket="+sock, raw).CombinedOutput(); err != nil {
		t.Fatalf("read the pull backup's export: %v\n%s", err, out)
	}
	if got := launchertest.SHA256File(t, raw); got != want {
		t.Errorf("the pull backup's export reads as %s, the guest's disk is %s", got, want)
	}
	d, _, err := c.GetDomain(ctx)
	launchertest.Must(t, err)
	if b := d.Spec.Metadata.KubeVirt.Backup; b == nil || b.Name != "pull" || b.EndTimestamp != nil || b.Mode != "Pull" {
		t.Fatalf("the pull backup's record while it serves: %+v", b)
	}
	other := *o
	other.Cmd, other.BackupName = backupv1.Abort, "other"
	if err := c.Backup(ctx, v, &other); err == nil || !strings.Contains(err.Error(), "differs from ongoing") {
		t.Errorf("abort of another backup: %v", err)
	}
	abort := *o
	abort.Cmd = backupv1.Abort
	launchertest.Must(t, c.Backup(ctx, v, &abort))
	if r := waitBackupEnd(t, ctx, c, "pull"); r.Failed || r.BackupMsg != "" {
		t.Errorf("the aborted pull backup's record: %+v, want completed without failure", r)
	}
}

// cbtVMI is the pod's test VMI with a filesystem PVC "data" and CBT in
// the given state, as virt-controller sets it in the VMI's status.
func cbtVMI(p *pod, state v1.ChangedBlockTrackingState) *v1.VirtualMachineInstance {
	v := p.VMI("cbt")
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "data", Serial: cbtSerial,
		DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "data-pvc"}}}})
	v.Status.ChangedBlockTracking = &v1.ChangedBlockTrackingStatus{State: state}
	return v
}

// dataImage places the PVC's raw image where virt-handler mounts a
// filesystem PVC, the pod user's (size 0: only its directory).
func dataImage(t *testing.T, p *pod, size int64) {
	t.Helper()
	path := p.Layout.PVCDisk("data")
	ownedDir(t, p, filepath.Dir(path))
	if size == 0 {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	launchertest.Must(t, err)
	launchertest.Must(t, errors.Join(f.Truncate(size), f.Close()))
	launchertest.Must(t, os.Chown(path, int(env.Cred.Uid), int(env.Cred.Gid)))
}

// ownedDir makes dir and its parents below the pod's directory, the pod
// user's.
func ownedDir(t *testing.T, p *pod, dir string) {
	t.Helper()
	launchertest.Must(t, os.MkdirAll(dir, 0o750))
	for d := dir; strings.HasPrefix(d, p.Dir+"/"); d = filepath.Dir(d) {
		launchertest.Must(t, os.Chown(d, int(env.Cred.Uid), int(env.Cred.Gid)))
	}
}

// checkDataStore: the Domain shows the data disk on the overlay with the
// image as its raw file data store.
func checkDataStore(t *testing.T, ctx context.Context, c *cmdclient.Client, overlay, image string) {
	t.Helper()
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain: exists %v, %v", exists, err)
	}
	for _, disk := range d.Spec.Devices.Disks {
		if disk.Alias == nil || disk.Alias.Name != "data" {
			continue
		}
		ds := string(disk.Source.DataStore)
		if disk.Source.File != overlay || disk.Driver == nil || disk.Driver.Type != "qcow2" ||
			!strings.Contains(ds, `"Type":"file"`) || !strings.Contains(ds, `"Format":{"Type":"raw"}`) || !strings.Contains(ds, `"File":"`+image+`"`) {
			t.Fatalf("data disk: source %s driver %+v dataStore %s; want %s in qcow2 over %s", disk.Source.File, disk.Driver, ds, overlay, image)
		}
		return
	}
	t.Fatalf("no disk of volume data in the Domain")
}

// badRequests: options virt-handler would not send are refused naming
// the field, and change nothing.
func badRequests(t *testing.T, ctx context.Context, c *cmdclient.Client, v *v1.VirtualMachineInstance, good *backupv1.BackupOptions) {
	t.Helper()
	etc := "/etc"
	for field, change := range map[string]func(o *backupv1.BackupOptions){
		"mode":            func(o *backupv1.BackupOptions) { o.Mode = "Sideways" },
		"cmd":             func(o *backupv1.BackupOptions) { o.Cmd = "Restore" },
		"targetPath":      func(o *backupv1.BackupOptions) { o.TargetPath = &etc },
		"backupName":      func(o *backupv1.BackupOptions) { o.BackupName = "../x" },
		"backupStartTime": func(o *backupv1.BackupOptions) { o.BackupStartTime = nil },
	} {
		o := *good
		change(&o)
		if err := c.Backup(ctx, v, &o); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("backup with a bad %s: %v, want refused naming it", field, err)
		}
	}
	if err := c.BackupRaw(ctx, v, []byte(`{"cmd":`)); err == nil || !strings.Contains(err.Error(), "options") {
		t.Errorf("undecodable options: %v, want refused naming options", err)
	}
	if d, _, err := c.GetDomain(ctx); err != nil || d.Spec.Metadata.KubeVirt.Backup != nil {
		t.Errorf("refused requests left a backup record: %+v, %v", d.Spec.Metadata.KubeVirt.Backup, err)
	}
}

// pushBackup is virt-handler's Start of a push backup into target.
func pushBackup(name string, start time.Time, target, incremental string) *backupv1.BackupOptions {
	st := metav1.NewTime(start)
	o := &backupv1.BackupOptions{BackupName: name, Cmd: backupv1.Start, Mode: backupv1.PushMode, BackupStartTime: &st, TargetPath: &target}
	if incremental != "" {
		o.Incremental = &incremental
	}
	return o
}

// guestWrite has the guest write 1 MiB of random data at MiB offset seek
// into the data disk (found by its serial) and sync it.
func guestWrite(t *testing.T, ctx context.Context, c *cmdclient.Client, p *pod, seek int) {
	t.Helper()
	script := `for d in /sys/block/vd*; do if [ "$(cat $d/serial 2>/dev/null)" = ` + cbtSerial + ` ]; then dev=/dev/${d##*/}; fi; done; ` +
		`[ -n "$dev" ] || exit 3; dd if=/dev/urandom of=$dev bs=1M count=1 seek=` + strconv.Itoa(seek) + ` conv=fsync 2>&1 && echo wrote $dev`
	code, out, err := c.Exec(ctx, p.DomainName(), "/bin/sh", []string{"-c", script}, 60)
	if err != nil || code != 0 {
		t.Fatalf("guest write at %d MiB: exit %d, %v: %s", seek, code, err, out)
	}
	t.Logf("guest: %s", strings.TrimSpace(out))
}

// waitAgent waits until the guest agent answers a ping (the launcher has
// seen it connect).
func waitAgent(t *testing.T, ctx context.Context, c *cmdclient.Client, p *pod) {
	t.Helper()
	launchertest.Eventually(t, "the guest agent's answer to a ping", time.Minute, 500*time.Millisecond, func() (bool, any) {
		err := c.GuestPing(ctx, p.DomainName(), 5)
		return err == nil, err
	})
}

// waitBackupEnd polls the Domain, as virt-handler reads it, until backup
// name has ended.
func waitBackupEnd(t *testing.T, ctx context.Context, c *cmdclient.Client, name string) *domainjson.BackupMetadata {
	t.Helper()
	var b *domainjson.BackupMetadata
	launchertest.Eventually(t, "the end of backup "+name, 2*time.Minute, 100*time.Millisecond, func() (bool, any) {
		d, _, err := c.GetDomain(ctx)
		launchertest.Must(t, err)
		b = d.Spec.Metadata.KubeVirt.Backup
		return b != nil && b.Name == name && b.EndTimestamp != nil, b
	})
	if !b.Completed {
		t.Errorf("backup %s ended without Completed: %+v", name, b)
	}
	return b
}

// restore chains the backups (each incremental on the one before, as a
// backup tool restores them) and returns the SHA-256 of the raw disk the
// chain reads as.
func restore(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	var prev string
	for i, f := range files {
		cp := filepath.Join(dir, filepath.Base(f))
		launchertest.Must(t, launchertest.CopyFile(f, cp))
		if i > 0 {
			if out, err := exec.Command("qemu-img", "rebase", "-u", "-f", "qcow2", "-b", prev, "-F", "qcow2", cp).CombinedOutput(); err != nil {
				t.Fatalf("rebase %s on %s: %v\n%s", cp, prev, err, out)
			}
		}
		prev = cp
	}
	raw := filepath.Join(dir, "restored.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", prev, raw).CombinedOutput(); err != nil {
		t.Fatalf("convert %s: %v\n%s", prev, err, out)
	}
	return launchertest.SHA256File(t, raw)
}
