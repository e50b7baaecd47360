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

// TestStatePaths: the NVRAM and TPM state directories are KubeVirt's
// (pkg/util PathForNVram, PathForSwtpm, PathForSwtpmLocalca), where
// virt-controller mounts the backend-storage volume for persistent EFI
// and TPM.
func TestStatePaths(t *testing.T) {
	pod := Default()
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"nvram non-root", pod.NVRAMDir(false), "/var/run/kubevirt-private/libvirt/qemu/nvram"},
		{"nvram root", pod.NVRAMDir(true), "/var/lib/libvirt/qemu/nvram"},
		{"swtpm non-root", pod.SwtpmDir(false), "/var/run/kubevirt-private/libvirt/qemu/swtpm"},
		{"swtpm root", pod.SwtpmDir(true), "/var/lib/libvirt/swtpm"},
		{"localca non-root", pod.SwtpmLocalCADir(false), "/var/run/kubevirt-private/var/lib/swtpm-localca"},
		{"localca root", pod.SwtpmLocalCADir(true), "/var/lib/swtpm-localca"},
		// Standalone, non-root paths move with the private dir; the
		// system daemon's do not (libvirt fixes them).
		{"standalone nvram non-root", Under("/w").NVRAMDir(false), "/w/private/libvirt/qemu/nvram"},
		{"standalone swtpm non-root", Under("/w").SwtpmDir(false), "/w/private/libvirt/qemu/swtpm"},
		{"standalone localca non-root", Under("/w").SwtpmLocalCADir(false), "/w/private/var/lib/swtpm-localca"},
		{"standalone nvram root", Under("/w").NVRAMDir(true), "/var/lib/libvirt/qemu/nvram"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
}

func TestRooted(t *testing.T) {
	l := Rooted("/w/run")
	if l.ShareDir != "/w/run/kubevirt" || l.ContainerDiskDir != "/w/run/kubevirt/container-disks" ||
		l.LibvirtRunDir != "/w/run/libvirt" || l.KernelBootVolumeDir != "/w/run/kubevirt-kernel-boot" {
		t.Errorf("Rooted: %+v", l)
	}
	if l.BlockDeviceDir != "/dev" {
		t.Errorf("BlockDeviceDir %q, want /dev (not below /var/run)", l.BlockDeviceDir)
	}
}

// TestMigrationSockets: the names KubeVirt v1.8.2's virt-handler and
// launcher use (migration-proxy.go SourceUnixFile and ConstructProxyKey,
// with the share dir as the base), in a pod and standalone.
func TestMigrationSockets(t *testing.T) {
	const uid = "3c1d1f2e-8e0a-4c55-9b7a-2f4e5d6c7b8a"
	pod, alone := Default(), Under("/w")
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"pod dir", pod.MigrationProxyDir(), "/var/run/kubevirt/migrationproxy"},
		{"pod libvirt connection", pod.MigrationSocket(uid, 0), "/var/run/kubevirt/migrationproxy/" + uid + "-source.sock"},
		{"pod memory", pod.MigrationSocket(uid, DirectMigrationPort), "/var/run/kubevirt/migrationproxy/" + uid + "-49152-source.sock"},
		{"pod disks", pod.MigrationSocket(uid, BlockMigrationPort), "/var/run/kubevirt/migrationproxy/" + uid + "-49153-source.sock"},
		{"standalone dir", alone.MigrationProxyDir(), "/w/share/migrationproxy"},
		{"standalone memory", alone.MigrationSocket(uid, DirectMigrationPort), "/w/share/migrationproxy/" + uid + "-49152-source.sock"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
	// sun_path holds 107 bytes and a NUL: the longest of them, in a pod,
	// with a UUID for the VMI UID, must fit.
	if p := pod.MigrationSocket(uid, BlockMigrationPort); len(p) > 107 {
		t.Errorf("%s: %d bytes, too long for a unix socket", p, len(p))
	}
}

func TestVirtiofsSockets(t *testing.T) {
	if got, want := Default().VirtiofsSocket("myfs"), "/var/run/kubevirt/virtiofs-containers/myfs.sock"; got != want {
		t.Errorf("pod: %s, want %s (virt-controller's --socket-path)", got, want)
	}
	if got, want := Under("/w").VirtiofsSocket("myfs"), "/w/share/virtiofs-containers/myfs.sock"; got != want {
		t.Errorf("standalone: %s, want %s", got, want)
	}
}
