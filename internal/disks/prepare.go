package disks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// Prepare creates every file vmi's disks need, using the facts Gather
// returned. It is idempotent: images that already exist (overlays, empty
// disks, host disks) are kept as they are, because recreating them would lose
// the guest's data; ISOs, which are derived from the spec and its sources
// only, are rebuilt and atomically replaced.
//
// On error, what this call made is removed again (files that were there
// before stay). On success, undo removes what this call made, for a caller
// whose next step (the define) failed.
func (p *Preparer) Prepare(ctx context.Context, vmi *v1.VirtualMachineInstance, vols map[string]facts.Volume) (undo func(), err error) {
	// What this call made, to be removed again if a later volume fails
	// (or, through undo, the define that follows): nothing is left half
	// made. Files that were there before (an overlay holding the guest's
	// writes) are never removed.
	type made struct {
		file string
		dirs []string
	}
	var fresh []made
	removeFresh := func() {
		for _, m := range fresh {
			if rerr := removeMade(m.file, m.dirs); rerr != nil && p.Log != nil {
				p.Log.Warn("removing a prepared file after a failure", "file", m.file, "reason", rerr)
			}
		}
	}
	defer func() {
		if err != nil {
			removeFresh()
		}
	}()
	p.mu.Lock()
	p.configDrive = nil
	p.mu.Unlock()
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if err := layout.CheckName(vol.Name); err != nil {
			return nil, fmt.Errorf("volume %d: %w", i, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if facts.VirtiofsVolume(vmi, vol.Name) {
			continue
		}
		if file, dirs, ok := p.madeFor(vmi, vol); ok {
			if _, serr := os.Lstat(file); errors.Is(serr, fs.ErrNotExist) {
				fresh = append(fresh, made{file, dirs})
			}
		}
		if err := p.prepareVolume(ctx, vmi, i, vol, vols); err != nil {
			return nil, fmt.Errorf("prepare volume %s: %w", vol.Name, err)
		}
		overlay, madeNow, err := p.cbtOverlay(ctx, vmi, vol)
		if madeNow {
			fresh = append(fresh, made{overlay, p.cbtOverlayDirs()})
		}
		if err != nil {
			return nil, fmt.Errorf("prepare volume %s: %w", vol.Name, err)
		}
	}
	if data := vmi.Annotations[v1.IgnitionAnnotation]; data != "" {
		file := p.Layout.IgnitionFile(vmi.Namespace, vmi.Name)
		if _, serr := os.Lstat(file); errors.Is(serr, fs.ErrNotExist) {
			fresh = append(fresh, made{file, []string{filepath.Dir(file), filepath.Dir(filepath.Dir(file)), filepath.Dir(filepath.Dir(filepath.Dir(file)))}})
		}
		if err := p.ignition(file, data); err != nil {
			return nil, err
		}
	}
	return removeFresh, nil
}

// ignition writes the kubevirt.io/ignitiondata annotation where the
// domain's fw_cfg entry reads it (the converter's compute.Ignition), as
// KubeVirt's launcher does for any non-empty value.
func (p *Preparer) ignition(file, data string) error {
	err := p.createAtomic(file, readOnlyMode, func(f *os.File) error {
		_, err := f.WriteString(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("annotation %s: %w", v1.IgnitionAnnotation, err)
	}
	return nil
}

func (p *Preparer) prepareVolume(ctx context.Context, vmi *v1.VirtualMachineInstance, i int, vol *v1.Volume, vols map[string]facts.Volume) error {
	l := p.Layout
	switch {
	case vol.ContainerDisk != nil:
		fv, ok := vols[vol.Name]
		if !ok || fv.BackingFormat == "" {
			return errors.New("containerDisk: backing image format unknown (Gather it first)")
		}
		return p.overlay(ctx, l.DiskOverlay(vol.Name), l.ContainerDiskImage(i), fv.BackingFormat)

	case vol.Ephemeral != nil:
		if vol.Ephemeral.PersistentVolumeClaim == nil {
			return errors.New("ephemeral: persistentVolumeClaim is required")
		}
		src, _, err := p.pvcSource(vmi, vol.Name)
		if err != nil {
			return fmt.Errorf("ephemeral: %w", err)
		}
		return p.overlay(ctx, l.DiskOverlay(vol.Name), src, "raw")

	case vol.EmptyDisk != nil:
		size := vol.EmptyDisk.Capacity.Value()
		if size <= 0 {
			return fmt.Errorf("emptyDisk.capacity %s: must be positive", vol.EmptyDisk.Capacity.String())
		}
		return p.emptyDisk(ctx, l.EmptyDisk(vol.Name), size)

	case vol.HostDisk != nil:
		path, err := p.hostDiskPath(vol)
		if err != nil {
			return err
		}
		return p.hostDisk(path, vol.HostDisk)

	case vol.CloudInitNoCloud != nil, vol.CloudInitConfigDrive != nil:
		return p.cloudInit(ctx, vmi, vol)

	case vol.ConfigMap != nil, vol.Secret != nil, vol.DownwardAPI != nil, vol.ServiceAccount != nil, vol.Sysprep != nil:
		return p.configISO(vol)

	case vol.DownwardMetrics != nil:
		return p.vhostmdDisk()
	}
	// PVCs, DataVolumes, hotplug and memory-dump volumes are provided by
	// the handler; container paths are file systems, not disks.
	return nil
}

// overlay creates a qcow2 overlay at final over backing (format fmt) unless
// final exists already: an existing overlay holds the guest's writes.
func (p *Preparer) overlay(ctx context.Context, final, backing, format string) error {
	if ok, err := exists(final); err != nil {
		return err
	} else if ok {
		p.log().Debug("keeping existing overlay", "path", final)
		return nil
	}
	// qemu-img resolves a relative backing path against the overlay's
	// directory; record an absolute one.
	abs, err := filepath.Abs(backing)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err != nil {
		return fmt.Errorf("backing image: %w", err)
	}
	err = p.createAtomic(final, imageMode, func(tmp *os.File) error {
		return p.runQemuImg(ctx, "create", "-q", "-f", "qcow2", "-b", abs, "-F", format, tmp.Name())
	})
	if err == nil {
		p.log().Info("created overlay", "path", final, "backing", abs, "backingFormat", format)
	}
	return err
}

// emptyDisk creates a qcow2 image of size bytes unless one is there.
func (p *Preparer) emptyDisk(ctx context.Context, final string, size int64) error {
	if ok, err := exists(final); err != nil {
		return err
	} else if ok {
		p.log().Debug("keeping existing empty disk", "path", final)
		return nil
	}
	err := p.createAtomic(final, imageMode, func(tmp *os.File) error {
		return p.runQemuImg(ctx, "create", "-q", "-f", "qcow2", tmp.Name(), strconv.FormatInt(size, 10))
	})
	if err == nil {
		p.log().Info("created empty disk", "path", final, "size", size)
	}
	return err
}

// hostDisk checks (type Disk) or creates (type DiskOrCreate) a raw host disk
// image. A new image is sparse; it is refused when the file system has less
// free space than its capacity, as the guest would later fail writing it.
func (p *Preparer) hostDisk(final string, hd *v1.HostDisk) error {
	ok, err := exists(final)
	if err != nil {
		return err
	}
	switch hd.Type {
	case v1.HostDiskExists:
		if !ok {
			return fmt.Errorf("hostDisk: image %s does not exist (type %s needs it to)", final, hd.Type)
		}
		return nil
	case v1.HostDiskExistsOrCreate:
	default:
		return fmt.Errorf("hostDisk.type %q: must be %s or %s", hd.Type, v1.HostDiskExists, v1.HostDiskExistsOrCreate)
	}
	if ok {
		p.log().Debug("keeping existing host disk", "path", final)
		return nil
	}
	size := hd.Capacity.Value()
	if size <= 0 {
		return fmt.Errorf("hostDisk.capacity %s: must be positive to create %s", hd.Capacity.String(), final)
	}
	size = (size + 511) / 512 * 512
	dir := filepath.Dir(final)
	if err := p.mkdirAll(dir); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil {
		if avail := int64(st.Bavail) * st.Bsize; avail < size {
			return fmt.Errorf("hostDisk: capacity %d bytes exceeds the %d bytes free in %s: %w", size, avail, dir, syscall.ENOSPC)
		}
	}
	err = p.createAtomic(final, imageMode, func(tmp *os.File) error {
		return tmp.Truncate(size)
	})
	if err == nil {
		p.log().Info("created host disk", "path", final, "size", size)
	}
	return err
}

// runQemuImg runs qemu-img; a full disk is reported as syscall.ENOSPC so
// callers can tell it from other failures.
func (p *Preparer) runQemuImg(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, p.qemuImg(), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "No space left on device") {
			return fmt.Errorf("qemu-img %s: %s: %w", args[0], msg, syscall.ENOSPC)
		}
		return fmt.Errorf("qemu-img %s: %w: %s", args[0], err, msg)
	}
	return nil
}

// hostDiskPath is where a hostDisk volume's image is reached, refusing a
// path whose last element cannot be a file name (empty, "/", "..").
func (p *Preparer) hostDiskPath(vol *v1.Volume) (string, error) {
	return p.Layout.HostDisk(vol.Name, vol.HostDisk.Path)
}
