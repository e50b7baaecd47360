package integration

import (
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestDownwardMetrics: a VMI with a downwardMetrics volume and the
// downwardMetrics device starts (the disk preparation refused the volume
// before). In the guest, the volume's disk holds vhostmd's signature and
// the metrics XML the launcher put there (none yet: virt-handler writes
// them while the VM runs), and the device's virtio-serial port is there by
// vhostmd's name, its socket bound by QEMU where virt-handler connects.
func TestDownwardMetrics(t *testing.T) {
	t.Parallel()
	p := env.New(t, "dmetrics", podOpts{})
	p.ExtraUserData = []string{
		`for d in /dev/vd*; do [ "$(head -c 4 $d)" = mvbd ] && echo "VL-VHOSTMD $(dd if=$d bs=1 skip=16 count=19 2>/dev/null) X"; done`,
		`echo "VL-PORTS $(cat /sys/class/virtio-ports/*/name | tr '\n' ' ')X"`,
	}
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)

	v := p.VMI("dmetrics-1", testguest.OptNoAgent)
	v.Spec.Domain.Devices.DownwardMetrics = &v1.DownwardMetrics{}
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "metrics",
		DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "metrics", VolumeSource: v1.VolumeSource{DownwardMetrics: &v1.DownwardMetricsVolumeSource{}}})
	launchertest.Must(t, c.Sync(ctx, v, nil))

	// The console shows the user-data script too: its lines hold "$(".
	ports := regexp.MustCompile(`VL-PORTS ([^$\n]*)X`)
	for deadline := time.Now().Add(bootTimeout); ports.FindStringSubmatch(p.Console()) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not report its ports:\n%s", launchertest.Tail(p.Console(), 2000))
		}
	}
	if m := regexp.MustCompile(`VL-VHOSTMD ([^$\n]*) X`).FindStringSubmatch(p.Console()); m == nil || m[1] != "<metrics></metrics>" {
		t.Errorf("the guest's view of the downwardMetrics disk: %q; want vhostmd's signature and empty metrics:\n%s", m, launchertest.Tail(p.Console(), 2000))
	}
	if m := ports.FindStringSubmatch(p.Console()); !regexp.MustCompile(`(^| )org\.github\.vhostmd\.1 `).MatchString(m[1]) {
		t.Errorf("the guest has no org.github.vhostmd.1 port:\n%s", launchertest.Tail(p.Console(), 2000))
	}
	if fi, err := os.Stat(p.Layout.DownwardMetricsSocket()); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the downwardMetrics socket: %v, %v; want QEMU's socket", fi, err)
	}
}
