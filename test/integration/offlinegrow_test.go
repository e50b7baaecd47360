package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestOfflineGrowth: a PVC grown while the VM was off (its status says
// 48 MiB, its disk.img still has 16) is grown before the domain starts, as
// KubeVirt v1.9's launcher grows it (expandDiskImagesOffline): the guest
// sees 48 MiB from its first boot, after a single Sync (the online growth
// comes only with a later one).
func TestOfflineGrowth(t *testing.T) {
	t.Parallel()
	const small, grown = 16 << 20, 48 << 20
	p := env.New(t, "offgrow", podOpts{})
	img := p.Layout.PVCDisk("data")
	launchertest.Must(t, os.MkdirAll(filepath.Dir(img), 0o755))
	launchertest.Must(t, os.Chown(filepath.Dir(img), int(env.Cred.Uid), int(env.Cred.Gid)))
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	launchertest.Must(t, err)
	launchertest.Must(t, f.Truncate(small))
	launchertest.Must(t, f.Close())
	launchertest.Must(t, os.Chown(img, int(env.Cred.Uid), int(env.Cred.Gid)))
	p.ExtraUserData = []string{`for b in /sys/block/vd*; do echo "VL-BLK $(cat $b/serial 2>/dev/null) $(cat $b/size) X"; done`}
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)

	v := p.VMI("offgrow-1", testguest.OptNoAgent)
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "data", Serial: "vldata",
		DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "data-claim"}}}})
	size, zero := resource.MustParse("48Mi"), v1.Percent("0")
	v.Status.VolumeStatus = append(v.Status.VolumeStatus, v1.VolumeStatus{Name: "data", Target: "vdb",
		PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "data-claim", FilesystemOverhead: &zero,
			Capacity: k8sv1.ResourceList{k8sv1.ResourceStorage: size}, Requests: k8sv1.ResourceList{k8sv1.ResourceStorage: size}}})
	launchertest.Must(t, c.Sync(ctx, v, nil))

	p.WaitConsole("VL-BLK vldata", bootTimeout)
	m := regexp.MustCompile(`VL-BLK vldata (\d+) X`).FindStringSubmatch(p.Console())
	if m == nil {
		t.Fatalf("the guest did not report its data disk:\n%s", launchertest.Tail(p.Console(), 2000))
	}
	if sectors, _ := strconv.Atoi(m[1]); sectors*512 != grown {
		t.Errorf("at its first boot the guest's data disk has %d bytes, want the PVC's %d", sectors*512, grown)
	}
	fi, err := os.Stat(img)
	launchertest.Must(t, err)
	if fi.Size() != grown {
		t.Errorf("disk.img has %d bytes, want %d", fi.Size(), grown)
	}
	log := p.Stderr.String()
	if !strings.Contains(log, `"msg":"disk grown before the start"`) || strings.Contains(log, `"msg":"growing disk"`) {
		t.Errorf("the launcher's log does not show the growth before the start (and none online)")
	}
}
