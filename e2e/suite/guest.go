package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// GuestImages are the test guest (internal/testguest) as a cluster's
// images: a containerdisk in KubeVirt's format (the disk at
// /disk/disk.qcow2, owned by 107, the qemu user) and a kernelBoot
// container (/boot/vmlinuz, /boot/vmlinuz.efi, /boot/initrd.img).
type GuestImages struct {
	Disk, Kernel string
	Guest        *testguest.Guest
}

// PushTestGuest builds the test guest (cached) and pushes its images.
func (e *Env) PushTestGuest(ctx context.Context) (GuestImages, error) {
	g, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		return GuestImages{}, fmt.Errorf("build the test guest: %w", err)
	}
	work, err := os.MkdirTemp("", "vl-e2e-guest-")
	if err != nil {
		return GuestImages{}, err
	}
	defer os.RemoveAll(work)
	qcow := filepath.Join(work, "disk.qcow2")
	if _, err := e.command(ctx, time.Minute, "", "/usr/bin/qemu-img", "convert", "-f", "raw", "-O", "qcow2", g.RootDisk, qcow); err != nil {
		return GuestImages{}, err
	}
	epoch := time.Unix(0, 0).UTC()
	gi := GuestImages{
		Disk:   e.Cluster.Registry() + "/vl-e2e/testguest-disk:1",
		Kernel: e.Cluster.Registry() + "/vl-e2e/testguest-kernel:1",
		Guest:  g,
	}
	disk := ociimage.Spec{
		Files:   []ociimage.File{{Dst: "/disk/disk.qcow2", Src: qcow, Mode: 0o440, UID: 107, GID: 107}},
		Epoch:   epoch,
		FilesBy: "e2e/suite: the test guest's root disk",
	}
	if err := e.Cluster.Images().Push(ctx, disk, gi.Disk); err != nil {
		return GuestImages{}, err
	}
	kernel := ociimage.Spec{
		Files: []ociimage.File{
			{Dst: "/boot/vmlinuz", Src: g.Kernel, Mode: 0o444},
			// The bzImage with its EFI stub: OVMF boots only that.
			{Dst: "/boot/vmlinuz.efi", Src: g.EFIKernel, Mode: 0o444},
			{Dst: "/boot/initrd.img", Src: g.Initrd, Mode: 0o444},
		},
		Epoch:   epoch,
		FilesBy: "e2e/suite: the test guest's kernel and initrd",
	}
	if err := e.Cluster.Images().Push(ctx, kernel, gi.Kernel); err != nil {
		return GuestImages{}, err
	}
	return gi, nil
}

// PushSidecarImage pushes KubeVirt's example hook sidecar, built as its release
// builds it (cmd/sidecars: the sidecar-shim entrypoint, the smbios example
// as /usr/bin/onDefineDomain, uid 1001), and returns its reference.
func (e *Env) PushSidecarImage(ctx context.Context) (string, error) {
	ref := e.Cluster.Registry() + "/kubevirt/example-hook-sidecar:" + KubeVirtVersion
	spec := ociimage.Spec{
		Files: append(nonRootBase(),
			ociimage.File{Dst: "/sidecar-shim", Src: filepath.Join(e.Bin, "sidecar-shim")},
			ociimage.File{Dst: "/usr/bin/onDefineDomain", Src: filepath.Join(e.Bin, "onDefineDomain")}),
		Epoch:   time.Unix(0, 0).UTC(),
		Config:  ociimage.Config{Entrypoint: []string{"/sidecar-shim"}, User: "1001"},
		FilesBy: "e2e/suite: KubeVirt's sidecar-shim and smbios hook " + KubeVirtVersion,
	}
	return ref, e.Cluster.Images().Push(ctx, spec, ref)
}
