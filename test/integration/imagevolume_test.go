package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestImageVolume boots the test VMI (a containerDisk root volume and a
// kernelBoot container) from a pod laid out as KubeVirt v1.9's
// virt-controller renders it with the ImageVolume feature gate: the
// launcher gets --image-volume, the container-disk directory is not
// mounted, the root disk's image is mounted read-only at
// /var/run/kubevirt-image-volume/disk_0 and the kernel's at
// /var/run/kubevirt-kernel-boot (here below the pod directory). The
// classic layout is TestLifecycle's.
//
// Two images: a classic container-disk image (/disk/disk.img, no
// containerDisk.path: the launcher finds the file) with a kernel image
// holding /boot/vmlinuz and /boot/initrd.img; and an image with the disk
// elsewhere named by containerDisk.path, with a kernel image whose
// kernelPath and initrdPath are absolute symbolic links (/vmlinuz ->
// /boot/vmlinuz-testguest), which must resolve inside the image. A Sync
// naming a file the image lacks fails first, naming the volume and the
// path, and leaves nothing behind; then the right VMI boots, QEMU reads
// the disk through the image volume, and SIGTERM ends the pod cleanly.
func TestImageVolume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		iv   launchertest.ImageVolumeLayout
	}{
		{"classic-image", launchertest.ImageVolumeLayout{}},
		{"path-and-links", launchertest.ImageVolumeLayout{
			DiskFile: "/images/testguest.qcow2", DiskPath: "/images/testguest.qcow2",
			KernelFile: "/boot/vmlinuz-testguest", KernelPath: "/vmlinuz",
			InitrdFile: "/boot/initrd.img-testguest", InitrdPath: "/initrd.img",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iv := tc.iv
			p := env.New(t, "iv", podOpts{ImageVolume: &iv})
			iv = *p.Options().ImageVolume // with the defaults filled in
			image := launchertest.SHA256File(t, p.RootImage())
			p.WaitReady(30 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := p.Client(ctx)

			// A path the image lacks: a clear error, nothing defined,
			// nothing linked.
			bad := p.VMI("iv-bad")
			missing := filepath.Join(filepath.Dir(iv.DiskFile), "missing.img")
			bad.Spec.Volumes[0].ContainerDisk.Path = missing
			err := c.Sync(ctx, bad, nil)
			if err == nil {
				t.Fatal("Sync with a containerDisk.path missing from the image succeeded")
			}
			for _, want := range []string{"volume root", p.Layout.ImageVolume(0), missing + " does not exist in the image"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Sync error %q lacks %q", err, want)
				}
			}
			if _, exists, err := c.GetDomain(ctx); err != nil || exists {
				t.Errorf("after the failed Sync: domain exists=%v err=%v", exists, err)
			}
			if left, _ := os.ReadDir(p.Layout.ContainerDiskDir); len(left) != 0 {
				t.Errorf("left in the container-disk dir after the failed Sync: %v", left)
			}

			v := p.VMI("iv-1")
			if err := c.Sync(ctx, v, nil); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			p.WaitConsole(testguest.MarkerReady, bootTimeout)
			out := p.Console()
			if _, ok := testguest.FindMarker(out, testguest.MarkerDiskWritten); !ok {
				t.Errorf("guest did not write its root disk; console:\n%s", out)
			}
			if n, _ := testguest.FindMarker(out, testguest.MarkerBootCount); n != "1" {
				t.Errorf("boot count %q, want 1 (a fresh overlay over the image)", n)
			}
			if !strings.Contains(out, "token iv-1") {
				t.Errorf("user-data output missing; console:\n%s", out)
			}

			// The classic paths are links into the image volumes, and the
			// domain uses them.
			for link, want := range map[string]string{
				p.Layout.ContainerDiskImage(0):                                        filepath.Join(p.Layout.ImageVolume(0), iv.DiskFile),
				filepath.Join(p.Layout.KernelBootDir(), filepath.Base(iv.KernelPath)): filepath.Join(p.Layout.KernelBootVolumeDir, iv.KernelFile),
				filepath.Join(p.Layout.KernelBootDir(), filepath.Base(iv.InitrdPath)): filepath.Join(p.Layout.KernelBootVolumeDir, iv.InitrdFile),
			} {
				if got, err := os.Readlink(link); err != nil || got != want {
					t.Errorf("%s -> %q (%v), want %s", link, got, err, want)
				}
			}
			d, exists, err := c.GetDomain(ctx)
			if err != nil || !exists {
				t.Fatalf("GetDomain: exists=%v err=%v", exists, err)
			}
			if want := filepath.Join(p.Layout.KernelBootDir(), filepath.Base(iv.KernelPath)); d.Spec.OS.Kernel != want {
				t.Errorf("domain kernel %q, want %q", d.Spec.OS.Kernel, want)
			}
			// QEMU holds the disk file open through the image volume.
			if !holdsOpen(p.QemuPid(), filepath.Join(p.Layout.ImageVolume(0), iv.DiskFile)) {
				t.Errorf("QEMU (pid %d) has no descriptor on %s", p.QemuPid(), filepath.Join(p.Layout.ImageVolume(0), iv.DiskFile))
			}
			// A repeated Sync keeps the links and the guest.
			qpid := p.QemuPid()
			if err := c.Sync(ctx, v, nil); err != nil || p.QemuPid() != qpid {
				t.Errorf("repeated Sync: %v, QEMU pid %d -> %d", err, qpid, p.QemuPid())
			}

			p.Signal(syscall.SIGTERM)
			p.WaitConsole(testguest.MarkerPowerOff, 60*time.Second)
			if code := p.ExitCode(60 * time.Second); code != 0 {
				t.Fatalf("exit status %d after graceful shutdown, want 0", code)
			}
			p.AssertNothingLeft()
			if got := launchertest.SHA256File(t, p.RootImage()); got != image {
				t.Errorf("root disk image changed: %s -> %s", image, got)
			}
		})
	}
}

// holdsOpen reports whether process pid has a descriptor on path.
func holdsOpen(pid int, path string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == path {
			return true
		}
	}
	return false
}
