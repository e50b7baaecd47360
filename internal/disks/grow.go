package disks

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// growTimeout bounds one qemu-img resize: growing a raw file is a
// truncate, or an fallocate of the new space for a preallocated volume.
const growTimeout = 2 * time.Minute

// GrowRaw grows the raw disk image at path to size bytes before QEMU opens
// it (KubeVirt's offline expansion of a PVC grown while the VM was off),
// allocating the new space when the volume is preallocated. The format is
// given, never probed (a guest may have written any header into a raw
// image), and qemu-img refuses to shrink without --shrink, which is never
// passed.
func (p *Preparer) GrowRaw(ctx context.Context, path string, size int64, preallocated bool) error {
	if size <= 0 {
		return fmt.Errorf("grow %s: size %d is not positive", path, size)
	}
	prealloc := "--preallocation=off"
	if preallocated {
		prealloc = "--preallocation=falloc"
	}
	ctx, cancel := context.WithTimeout(ctx, growTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.qemuImg(), "resize", "-f", "raw", prealloc, path, strconv.FormatInt(size, 10)).CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("grow %s to %d bytes: qemu-img resize took more than %v", path, size, growTimeout)
		}
		return fmt.Errorf("grow %s to %d bytes: %w: %s", path, size, err, strings.TrimSpace(string(out)))
	}
	return nil
}
