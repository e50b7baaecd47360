package disks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// makeTree creates entries below root: "d" a directory, "f" a file of
// 1 KiB, "l:TARGET" a symbolic link to TARGET. Parents come first in the
// order given.
func makeTree(t *testing.T, root string, entries [][2]string) {
	t.Helper()
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(root, e[0])
		var err error
		switch kind := e[1]; {
		case kind == "d":
			err = os.MkdirAll(p, 0o755)
		case kind == "f":
			err = os.WriteFile(p, make([]byte, 1024), 0o444)
		case strings.HasPrefix(kind, "l:"):
			err = os.Symlink(strings.TrimPrefix(kind, "l:"), p)
		default:
			t.Fatalf("bad entry kind %q", kind)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFindImageVolumeDisk: KubeVirt's rules for which file of a container
// disk's image volume is the disk, and that no path resolves outside the
// image, whatever links the image holds. Beside the image root lies a host
// directory "outside" with files a malicious image would like to reach.
func TestFindImageVolumeDisk(t *testing.T) {
	tests := []struct {
		name    string
		entries [][2]string
		path    string // containerDisk.path
		want    string // below the image root; "" when an error is expected
		wantErr string
	}{
		{name: "path given", entries: [][2]string{{"disk", "d"}, {"disk/disk.img", "f"}, {"other.img", "f"}},
			path: "/other.img", want: "/other.img"},
		{name: "path given, deep", entries: [][2]string{{"srv/images", "d"}, {"srv/images/guest.qcow2", "f"}},
			path: "/srv/images/guest.qcow2", want: "/srv/images/guest.qcow2"},
		{name: "path given, missing", entries: [][2]string{{"disk", "d"}, {"disk/disk.img", "f"}},
			path: "/disk/nope.img", wantErr: "/disk/nope.img does not exist in the image"},
		{name: "path given, missing parent", entries: [][2]string{{"disk.img", "f"}},
			path: "/images/disk.img", wantErr: "/images does not exist in the image"},
		{name: "path given, a directory", entries: [][2]string{{"disk", "d"}, {"disk/disk.img", "f"}},
			path: "/disk", wantErr: "/disk is not a regular file"},
		{name: "path given, relative link inside", entries: [][2]string{{"disk", "d"}, {"data", "d"}, {"data/real.qcow2", "f"}, {"disk/disk.img", "l:../data/real.qcow2"}},
			path: "/disk/disk.img", want: "/data/real.qcow2"},
		{name: "path given, absolute link is the image's root", entries: [][2]string{{"disk", "d"}, {"data", "d"}, {"data/real.qcow2", "f"}, {"disk/disk.img", "l:/data/real.qcow2"}},
			path: "/disk/disk.img", want: "/data/real.qcow2"},
		{name: "path given, linked directory inside", entries: [][2]string{{"data", "d"}, {"data/disk.img", "f"}, {"disk", "l:data"}},
			path: "/disk/disk.img", want: "/data/disk.img"},
		{name: "relative link escaping with ..", entries: [][2]string{{"disk", "d"}, {"disk/disk.img", "l:../../../outside/secret.img"}},
			path: "/disk/disk.img", wantErr: "/outside does not exist in the image"},
		{name: "absolute link to a host path", entries: [][2]string{{"disk", "d"}, {"disk/disk.img", "l:@OUTSIDE@/secret.img"}},
			path: "/disk/disk.img", wantErr: "does not exist in the image"},
		{name: "linked directory escaping", entries: [][2]string{{"disk", "l:../outside"}},
			path: "/disk/secret.img", wantErr: "/outside does not exist in the image"},
		{name: "link loop", entries: [][2]string{{"a", "l:b"}, {"b", "l:a"}},
			path: "/a", wantErr: "more than 40 symbolic links"},

		{name: "no path, classic /disk/disk.img", entries: [][2]string{{"disk", "d"}, {"disk/disk.img", "f"}, {"etc", "d"}, {"etc/os-release", "f"}},
			want: "/disk/disk.img"},
		{name: "no path, any name in /disk", entries: [][2]string{{"disk", "d"}, {"disk/fedora.qcow2", "f"}},
			want: "/disk/fedora.qcow2"},
		{name: "no path, single file at the root (ORAS)", entries: [][2]string{{"cirros.qcow2", "f"}},
			want: "/cirros.qcow2"},
		{name: "no path, single link at the root resolved inside", entries: [][2]string{{"disk.img", "l:/nowhere/disk.img"}},
			wantErr: "/nowhere does not exist in the image"},
		{name: "no path, several files in /disk", entries: [][2]string{{"disk", "d"}, {"disk/a.img", "f"}, {"disk/b.img", "f"}},
			wantErr: `/disk holds 2 entries ["a.img" "b.img"], not exactly one file; set containerDisk.path`},
		{name: "no path, a directory in /disk", entries: [][2]string{{"disk", "d"}, {"disk/sub", "d"}},
			wantErr: `/disk holds 1 entries ["sub"]`},
		{name: "no path, empty /disk", entries: [][2]string{{"disk", "d"}},
			wantErr: "/disk holds 0 entries"},
		{name: "no path, several files, no /disk", entries: [][2]string{{"a.img", "f"}, {"b.img", "f"}},
			wantErr: "the image's root has 2 entries (not a single file) and no /disk directory"},
		{name: "no path, empty image", entries: nil,
			wantErr: "the image's root has 0 entries"},
		{name: "no path, /disk a link out of the image", entries: [][2]string{{"disk", "l:@OUTSIDE@"}, {"etc", "d"}},
			wantErr: "no /disk directory"},
		{name: "no path, /disk a link inside", entries: [][2]string{{"images", "d"}, {"images/x.img", "f"}, {"disk", "l:images"}},
			want: "/images/x.img"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			makeTree(t, outside, [][2]string{{"secret.img", "f"}, {"disk.img", "f"}})
			root := filepath.Join(base, "disk_0")
			entries := make([][2]string, len(tt.entries))
			for i, e := range tt.entries {
				entries[i] = [2]string{e[0], strings.ReplaceAll(e[1], "@OUTSIDE@", outside)}
			}
			makeTree(t, root, entries)
			got, err := findImageVolumeDisk(root, tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tt.want); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
			if real, err := filepath.EvalSymlinks(got); err != nil || real != got {
				t.Errorf("result %s holds a symbolic link (real path %s, %v)", got, real, err)
			}
		})
	}
}

// imageVolumeVMI has containerDisk volumes a and b (b's path given),
// a cloud-init volume between them, and a kernelBoot container.
func imageVolumeVMI(kernelPath, initrdPath string) *v1.VirtualMachineInstance {
	b := containerDisk("b")
	b.ContainerDisk.Path = "/images/b.qcow2"
	v := vmiWith(containerDisk("a"),
		v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#!/bin/sh\n"}}},
		b)
	v.Spec.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{
		Image: "example/kernel", KernelPath: kernelPath, InitrdPath: initrdPath}}
	return v
}

// placeImageVolumes lays the image volumes out as KubeVirt v1.9's
// virt-controller mounts them: disk_0 a classic container-disk image
// (/disk/disk.img), disk_2 an image with the file elsewhere, and the
// kernel-boot image with its files in /boot.
func placeImageVolumes(t *testing.T, p *Preparer) {
	t.Helper()
	l := p.Layout
	for _, d := range []string{filepath.Join(l.ImageVolume(0), "disk"), filepath.Join(l.ImageVolume(2), "images"), filepath.Join(l.KernelBootVolumeDir, "boot"), l.ContainerDiskDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(l.ImageVolume(0), "disk", "disk.img"), "1M")
	run(t, "qemu-img", "create", "-q", "-f", "raw", filepath.Join(l.ImageVolume(2), "images", "b.qcow2"), "1M")
	makeTree(t, l.KernelBootVolumeDir, [][2]string{{"boot/vmlinuz-6.1", "f"}, {"boot/vmlinuz", "l:vmlinuz-6.1"}, {"boot/initrd.img", "f"}})
}

func TestLinkImageVolumes(t *testing.T) {
	p, _ := newPreparer(t)
	p.ImageVolume = true
	placeImageVolumes(t, p)
	l := p.Layout
	v := imageVolumeVMI("/boot/vmlinuz", "/boot/initrd.img")

	// Gather links first, then reads the images through the links.
	vols, err := p.Gather(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	if vols["a"].BackingFormat != "qcow2" || vols["b"].BackingFormat != "raw" {
		t.Errorf("formats a=%q b=%q, want qcow2 and raw", vols["a"].BackingFormat, vols["b"].BackingFormat)
	}
	for link, want := range map[string]string{
		l.ContainerDiskImage(0):                        filepath.Join(l.ImageVolume(0), "disk", "disk.img"),
		l.ContainerDiskImage(2):                        filepath.Join(l.ImageVolume(2), "images", "b.qcow2"),
		filepath.Join(l.KernelBootDir(), "vmlinuz"):    filepath.Join(l.KernelBootVolumeDir, "boot", "vmlinuz-6.1"),
		filepath.Join(l.KernelBootDir(), "initrd.img"): filepath.Join(l.KernelBootVolumeDir, "boot", "initrd.img"),
	} {
		if got, err := os.Readlink(link); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %s", link, got, err, want)
		}
	}
	if _, err := os.Lstat(l.ContainerDiskImage(1)); !os.IsNotExist(err) {
		t.Errorf("a link for the cloud-init volume: %v", err)
	}
	// A second Sync (or a restarted launcher) finds its own links.
	if err := p.LinkImageVolumes(v); err != nil {
		t.Fatalf("second LinkImageVolumes: %v", err)
	}

	// Something else at a classic path is never replaced.
	os.Remove(l.ContainerDiskImage(0))
	if err := os.Symlink("/etc/hostname", l.ContainerDiskImage(0)); err != nil {
		t.Fatal(err)
	}
	err = p.LinkImageVolumes(v)
	if err == nil || !strings.Contains(err.Error(), "volume a:") || !strings.Contains(err.Error(), "already exists and is not that link") {
		t.Errorf("foreign link at the classic path: %v", err)
	}
	if got, _ := os.Readlink(l.ContainerDiskImage(0)); got != "/etc/hostname" {
		t.Errorf("foreign link replaced by %q", got)
	}
}

// TestLinkImageVolumesFailureLeavesNothing: a missing file names the volume
// (or field), the image volume and the path, and the links and directory
// made before the failure are gone again.
func TestLinkImageVolumesFailureLeavesNothing(t *testing.T) {
	tests := []struct {
		name, kernel, initrd string
		breakIt              func(p *Preparer)
		want                 []string
	}{
		{name: "disk missing", kernel: "/boot/vmlinuz", initrd: "/boot/initrd.img",
			breakIt: func(p *Preparer) { os.Remove(filepath.Join(p.Layout.ImageVolume(2), "images", "b.qcow2")) },
			want:    []string{"volume b: containerDisk image volume ", "disk_2: ", "/images/b.qcow2 does not exist in the image"}},
		{name: "disk volume not mounted", kernel: "/boot/vmlinuz", initrd: "/boot/initrd.img",
			breakIt: func(p *Preparer) { os.RemoveAll(p.Layout.ImageVolume(2)) },
			want:    []string{"volume b: containerDisk image volume: ", "disk_2 is not there (is the image volume mounted?)"}},
		{name: "kernel boot volume not mounted", kernel: "/boot/vmlinuz", initrd: "/boot/initrd.img",
			breakIt: func(p *Preparer) { os.RemoveAll(p.Layout.KernelBootVolumeDir) },
			want:    []string{"spec.domain.firmware.kernelBoot.container: kernel boot image volume: ", "kernelvol is not there"}},
		{name: "initrd missing", kernel: "/boot/vmlinuz", initrd: "/boot/initrd-6.1.img",
			want: []string{"spec.domain.firmware.kernelBoot.container.initrdPath: kernel boot image volume ", "/boot/initrd-6.1.img does not exist in the image"}},
		{name: "kernel is a directory", kernel: "/boot", initrd: "/boot/initrd.img",
			want: []string{"kernelPath: kernel boot image volume ", "/boot is not a regular file"}},
		{name: "same file name", kernel: "/boot/vmlinuz", initrd: "/initrd/vmlinuz",
			want: []string{`kernelPath "/boot/vmlinuz" and initrdPath "/initrd/vmlinuz" have the same file name`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newPreparer(t)
			p.ImageVolume = true
			placeImageVolumes(t, p)
			if tt.breakIt != nil {
				tt.breakIt(p)
			}
			_, err := p.Gather(context.Background(), imageVolumeVMI(tt.kernel, tt.initrd))
			if err == nil {
				t.Fatal("Gather succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			left, _ := os.ReadDir(p.Layout.ContainerDiskDir)
			if len(left) != 0 {
				t.Errorf("left in the container-disk dir after the failure: %v", left)
			}
		})
	}
}

// TestClassicLayoutHintsAtImageVolume: without --image-volume, a pod laid
// out for image volumes fails with the classic error plus the reason.
func TestClassicLayoutHintsAtImageVolume(t *testing.T) {
	p, _ := newPreparer(t)
	placeImageVolumes(t, p)
	_, err := p.Gather(context.Background(), imageVolumeVMI("/boot/vmlinuz", "/boot/initrd.img"))
	if err == nil || !strings.Contains(err.Error(), "containerDisk: image "+p.Layout.ContainerDiskImage(0)+" does not exist") ||
		!strings.Contains(err.Error(), "the launcher has no --image-volume") {
		t.Errorf("classic layout over image volumes: %v", err)
	}
}
