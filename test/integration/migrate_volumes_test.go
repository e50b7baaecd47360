package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// dataWriter is user-data: the guest writes "VLD-<n>-" to its disk of
// serial vldata at 1 MiB, synced, every 0.2 s (n counting up).
const dataWriter = `(for b in /sys/block/vd*; do [ "$(cat $b/serial 2>/dev/null)" = vldata ] && D=/dev/${b##*/}; done; n=0; while :; do printf 'VLD-%d-' $n | dd of=$D bs=512 seek=2048 conv=notrunc,fsync 2>/dev/null; n=$((n+1)); sleep 0.2; done) &`

var dataCount = regexp.MustCompile(`VLD-(\d+)-`)

// TestMigrateVolumeFsToBlock: a volume migration (status.migratedVolumes)
// of a filesystem PVC of 16 MiB, whose destination is a block PVC of
// 32 MiB (a loop device) in the target pod. The source sends the
// destination XML as KubeVirt v1.9.0 does: the disk becomes the block
// PVC's device node, sliced to the source's 16 MiB. The block migration
// copies the disk; the target's QEMU opens the device with that slice, and
// the guest, which writes a count to the disk every 0.2 s, goes on
// writing there.
func TestMigrateVolumeFsToBlock(t *testing.T) { volumeMigration(t, false) }

// TestMigrateVolumeBlockToFs: the other way, a block PVC of 16 MiB (a loop
// device) to a filesystem PVC whose disk.img has 32 MiB.
func TestMigrateVolumeBlockToFs(t *testing.T) { volumeMigration(t, true) }

// volumeMigration migrates a 16 MiB volume to a 32 MiB one of the other
// mode (fromBlock: from a block PVC to a filesystem one).
func volumeMigration(t *testing.T, fromBlock bool) {
	testenv.Root(t, "a loop device for the block PVC")
	const small, big = 16 << 20, 32 << 20
	backing := filepath.Join(t.TempDir(), "block-pvc")
	f, err := os.Create(backing)
	launchertest.Must(t, err)
	blockSize := int64(big)
	if fromBlock {
		blockSize = small
	}
	launchertest.Must(t, f.Truncate(blockSize))
	launchertest.Must(t, f.Close())
	out, err := exec.Command("losetup", "--find", "--show", backing).Output()
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", loop, err, out)
		}
	})
	var st unix.Stat_t
	launchertest.Must(t, unix.Stat(loop, &st))
	fs, block := k8sv1.PersistentVolumeFilesystem, k8sv1.PersistentVolumeBlock
	var srcPath, dstPath string // the volumes' storage on this machine
	mp := newMigrationPairWith(t, false, pairSetup{vmi: func(v *v1.VirtualMachineInstance, a, b *pod) {
		filePod, blockPod, fileSize := a, b, small
		if fromBlock {
			filePod, blockPod, fileSize = b, a, big
		}
		img := filePod.Layout.PVCDisk("data")
		launchertest.Must(t, os.MkdirAll(filepath.Dir(img), 0o755))
		launchertest.Must(t, os.Chown(filepath.Dir(img), int(env.Cred.Uid), int(env.Cred.Gid)))
		launchertest.Must(t, os.WriteFile(img, make([]byte, fileSize), 0o660))
		launchertest.Must(t, os.Chown(img, int(env.Cred.Uid), int(env.Cred.Gid)))
		node := blockPod.Layout.BlockDevice("data")
		launchertest.Must(t, os.MkdirAll(filepath.Dir(node), 0o755))
		launchertest.Must(t, unix.Mknod(node, unix.S_IFBLK|0o660, int(st.Rdev)))
		launchertest.Must(t, os.Chown(node, int(env.Cred.Uid), int(env.Cred.Gid)))
		srcPath, dstPath = img, backing
		if fromBlock {
			srcPath, dstPath = backing, img
		}
		v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "data", Serial: "vldata",
			DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
		v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "data-claim"}}}})
	}}, dataWriter)
	srcMode, dstMode := &fs, &block
	if fromBlock {
		srcMode, dstMode = &block, &fs
	}
	mp.vm.Status.MigratedVolumes = []v1.StorageMigratedVolumeInfo{{VolumeName: "data",
		SourcePVCInfo:      &v1.PersistentVolumeClaimInfo{ClaimName: "data-old", VolumeMode: srcMode},
		DestinationPVCInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "data-claim", VolumeMode: dstMode}}}
	readCount := func(path string) int {
		t.Helper()
		f, err := os.Open(path)
		launchertest.Must(t, err)
		defer f.Close()
		buf := make([]byte, 64)
		_, err = f.ReadAt(buf, 1<<20)
		launchertest.Must(t, err)
		m := dataCount.FindSubmatch(buf)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	before := readCount(srcPath)
	if before < 0 {
		t.Fatalf("the guest wrote no count to its data disk")
	}
	mp.prepareTarget(t)
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, migration.Options{ProgressTimeout: 150, CompletionTimeoutPerGiB: 150}))
	if m := waitMigrationOf(t, mp.ctx, mp.ca, "mig-1", 3*time.Minute); m.Failed {
		t.Fatalf("the migration failed: %+v\ntarget:\n%s", m, launchertest.Tail(mp.b.Stderr.String(), 3000))
	}
	launchertest.Must(t, mp.cb.FinalizeMigration(mp.ctx, mp.vm, nil))
	last := testguest.Counts(mp.a.Console())
	mp.b.WaitConsole("VL-COUNT-"+strconv.Itoa(last[len(last)-1]+10), time.Minute)
	// The target's QEMU: the destination PVC, sliced to the source's size.
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(mp.b.QemuPid()), "cmdline"))
	launchertest.Must(t, err)
	args := string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	driver, path := "host_device", strings.TrimPrefix(mp.b.Layout.BlockDevice("data"), mp.b.Dir)
	if fromBlock {
		driver, path = "file", strings.TrimPrefix(mp.b.Layout.PVCDisk("data"), mp.b.Dir)
	}
	if !regexp.MustCompile(`"driver":"`+driver+`","filename":"[^"]*`+regexp.QuoteMeta(path)+`"`).MatchString(args) ||
		!strings.Contains(args, `"offset":0,"size":`+strconv.Itoa(small)) {
		t.Errorf("the target's QEMU does not open %s (%s) with a slice of %d bytes:\n%s", path, driver, small, args)
	}
	after := readCount(dstPath)
	if after <= before {
		t.Errorf("the destination PVC holds count %d; the guest had written %d before the migration", after, before)
	}
	time.Sleep(time.Second)
	if again := readCount(dstPath); again <= after {
		t.Errorf("the guest in the target does not write to the destination PVC: count %d, then %d", after, again)
	}
	t.Logf("counts on the disk: %d before the migration, %d and %d on the destination PVC after", before, after, readCount(dstPath))
}
