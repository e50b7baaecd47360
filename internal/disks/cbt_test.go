package disks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestCBTOverlay: with changed block tracking, Prepare puts a qcow2 overlay
// in the CBT directory in front of a PVC's raw image, the image its data
// file, untouched (qemu-img create would have emptied it); writes through
// the overlay land in the image. A second Prepare keeps the overlay (its
// bitmaps are the backups' base); one found naming another image (the
// pod's directories moved) is pointed at this one, its bitmap kept. undo
// removes an overlay this call made; an image that is no regular file is
// refused; without CBT, nothing is made.
func TestCBTOverlay(t *testing.T) {
	testenv.Programs(t, "qemu-storage-daemon", "qemu-img", "qemu-io")
	p, dir := newPreparer(t)
	l := p.Layout
	ctx := context.Background()
	img := l.PVCDisk("data")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "create", "-q", "-f", "raw", img, "8M")
	run(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 1M 64k", img)
	vmi := vmiWith(v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}})
	overlay := l.CBTOverlay("data", false)

	if _, err := p.Prepare(ctx, vmi, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(overlay); err == nil {
		t.Fatalf("an overlay without CBT")
	}

	vmi.Status.ChangedBlockTracking = &v1.ChangedBlockTrackingStatus{State: v1.ChangedBlockTrackingInitializing}
	undo, err := p.Prepare(ctx, vmi, nil)
	if err != nil {
		t.Fatal(err)
	}
	info := run(t, "qemu-img", "info", "-U", overlay)
	if !strings.Contains(info, "file format: qcow2") || !strings.Contains(info, "data file: "+img) || !strings.Contains(info, "data file raw: true") ||
		!strings.Contains(info, "virtual size: 8 MiB") {
		t.Fatalf("overlay:\n%s", info)
	}
	run(t, "qemu-io", "-f", "raw", "-c", "read -P 0x5a 1M 64k", img)
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x33 2M 64k", overlay)
	run(t, "qemu-io", "-f", "raw", "-c", "read -P 0x33 2M 64k", img)

	// Kept: a bitmap made now survives the next Prepare.
	run(t, "qemu-img", "bitmap", "--add", overlay, "cp1")
	if _, err := p.Prepare(ctx, vmi, nil); err != nil {
		t.Fatal(err)
	}
	if info := run(t, "qemu-img", "info", "-U", overlay); !strings.Contains(info, "name: cp1") {
		t.Errorf("the bitmap did not survive a second Prepare:\n%s", info)
	}

	// The pod's directories moved: the overlay is pointed at the image
	// where it is now.
	p2 := &Preparer{Layout: layout.Under(filepath.Join(dir, "moved"))}
	img2 := p2.Layout.PVCDisk("data")
	if err := os.MkdirAll(filepath.Dir(img2), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "cp", img, img2)
	if err := os.MkdirAll(p2.Layout.CBTDir(false), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "cp", overlay, p2.Layout.CBTOverlay("data", false))
	if _, err := p2.Prepare(ctx, vmi, nil); err != nil {
		t.Fatal(err)
	}
	if info := run(t, "qemu-img", "info", "-U", p2.Layout.CBTOverlay("data", false)); !strings.Contains(info, "data file: "+img2) || !strings.Contains(info, "name: cp1") {
		t.Errorf("moved overlay:\n%s", info)
	}

	undo()
	if _, err := os.Stat(overlay); !os.IsNotExist(err) {
		t.Errorf("undo left the overlay: %v", err)
	}
	if _, err := os.Stat(img); err != nil {
		t.Errorf("undo removed the image: %v", err)
	}

	// An image that is no regular file (a block volume's place) is refused.
	p3, _ := newPreparer(t)
	if err := os.MkdirAll(p3.Layout.PVCDisk("data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := p3.Prepare(ctx, vmi, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Prepare over a directory: %v", err)
	}
	if _, err := os.Stat(p3.Layout.CBTOverlay("data", false)); !os.IsNotExist(err) {
		t.Errorf("a refused Prepare left an overlay: %v", err)
	}
}
