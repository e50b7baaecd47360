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

// standInGuests are the containerDisk images KubeVirt's functional suite
// boots its VMIs from (tests/containerdisk: <prefix>/<name>-container-disk-demo:<tag>)
// that the e2e cluster stands in for: their real images cannot be pulled here.
var standInGuests = []string{"alpine", "cirros"}

// PushStandInGuests pushes, under the names KubeVirt's functional suite
// gives its guests' containerDisks (prefix <registry>/kubevirt, tag
// KubeVirtVersion), the test guest's root disk in KubeVirt's containerDisk
// layout. It is a disk, not a system a BIOS boots: the VMIs run (QEMU,
// their pods, KubeVirt's view of them are all real) but the guest finds
// nothing to boot, so specs that log in to it cannot pass on either
// launcher.
func (e *Env) PushStandInGuests(ctx context.Context) error {
	g, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		return fmt.Errorf("build the test guest: %w", err)
	}
	work, err := os.MkdirTemp("", "vl-e2e-standin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	qcow := filepath.Join(work, "disk.qcow2")
	if _, err := e.command(ctx, time.Minute, "", "/usr/bin/qemu-img", "convert", "-f", "raw", "-O", "qcow2", g.RootDisk, qcow); err != nil {
		return err
	}
	for _, name := range standInGuests {
		spec := ociimage.Spec{
			Files:   []ociimage.File{{Dst: "/disk/disk.qcow2", Src: qcow, Mode: 0o440, UID: 107, GID: 107}},
			Epoch:   time.Unix(0, 0).UTC(),
			FilesBy: "e2e/suite: the test guest's disk standing in for KubeVirt's " + name + " containerDisk",
		}
		if err := e.Cluster.Images().Push(ctx, spec, e.StandInGuestImage(name)); err != nil {
			return err
		}
	}
	return nil
}

// StandInGuestImage is the reference KubeVirt's functional suite gives
// guest name's containerDisk in this cluster.
func (e *Env) StandInGuestImage(name string) string {
	return e.kubevirtImage(name + "-container-disk-demo")
}
