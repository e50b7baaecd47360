package disks

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestGrowRaw: a raw image grows to the size asked, sparse unless its
// volume is preallocated; it never shrinks; and an image is grown as the
// raw file it is even when its content looks like another format (a guest
// can write a qcow2 header into its disk: probing would take it for one).
func TestGrowRaw(t *testing.T) {
	p, dir := newPreparer(t)
	ctx := context.Background()
	const mib = 1 << 20
	img := func(name string) string {
		path := filepath.Join(dir, name)
		run(t, "qemu-img", "create", "-q", "-f", "raw", path, "4M")
		return path
	}
	stat := func(path string) (size, allocated int64) {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Size, st.Blocks * 512
	}

	sparse := img("sparse.img")
	if err := p.GrowRaw(ctx, sparse, 12*mib, false); err != nil {
		t.Fatalf("grow: %v", err)
	}
	if size, alloc := stat(sparse); size != 12*mib || alloc > mib {
		t.Errorf("grown sparse image: %d bytes, %d allocated; want 12 MiB, next to nothing allocated", size, alloc)
	}

	full := img("full.img")
	if err := p.GrowRaw(ctx, full, 12*mib, true); err != nil {
		t.Fatalf("grow preallocated: %v", err)
	}
	if size, alloc := stat(full); size != 12*mib || alloc < 8*mib {
		t.Errorf("grown preallocated image: %d bytes, %d allocated; want 12 MiB with the 8 new MiB allocated", size, alloc)
	}

	if err := p.GrowRaw(ctx, sparse, 2*mib, false); err == nil {
		t.Errorf("shrinking was not refused")
	}
	if size, _ := stat(sparse); size != 12*mib {
		t.Errorf("after a refused shrink the image has %d bytes, want 12 MiB", size)
	}
	if err := p.GrowRaw(ctx, sparse, 0, false); err == nil || !strings.Contains(err.Error(), "not positive") {
		t.Errorf("size 0: %v", err)
	}

	looksQcow2 := filepath.Join(dir, "guest-wrote-qcow2.img")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", looksQcow2, "1G")
	if err := p.GrowRaw(ctx, looksQcow2, 8*mib, false); err != nil {
		t.Fatalf("grow a raw image with a qcow2 header: %v", err)
	}
	if size, _ := stat(looksQcow2); size != 8*mib {
		t.Errorf("a raw image with a qcow2 header: %d bytes after the growth, want 8 MiB (grown as raw)", size)
	}
	if err := p.GrowRaw(ctx, filepath.Join(dir, "missing.img"), 8*mib, false); err == nil {
		t.Errorf("a missing image: no error")
	}
}
