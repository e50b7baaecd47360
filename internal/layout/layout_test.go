package layout

import (
	"strings"
	"testing"
)

// TestImageVolumeRoots: in a pod the image volumes are where KubeVirt
// v1.9's virt-controller mounts them; standalone they stay under the
// working directory.
func TestImageVolumeRoots(t *testing.T) {
	d := Default()
	if got := d.ImageVolume(3); got != "/var/run/kubevirt-image-volume/disk_3" {
		t.Errorf("pod ImageVolume(3) = %s", got)
	}
	if d.KernelBootVolumeDir != "/var/run/kubevirt-kernel-boot" {
		t.Errorf("pod kernel boot volume %s", d.KernelBootVolumeDir)
	}
	if d.ContainerDiskImage(3) != "/var/run/kubevirt/container-disks/disk_3.img" || d.KernelBootDir() != "/var/run/kubevirt/container-disks/kernel-boot" {
		t.Errorf("classic paths %s %s", d.ContainerDiskImage(3), d.KernelBootDir())
	}
	u := Under("/w")
	for _, p := range []string{u.ImageVolume(0), u.KernelBootVolumeDir} {
		if !strings.HasPrefix(p, "/w/") || len(p) > len("/w/")+16 {
			t.Errorf("standalone root %s: not a short name under /w", p)
		}
	}
}
