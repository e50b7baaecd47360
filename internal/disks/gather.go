package disks

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// probeTimeout bounds one qemu-img info run in wall-clock time; the CPU limit
// inside it is probeCPUSeconds.
const (
	probeTimeout    = 30 * time.Second
	probeCPUSeconds = 10
)

// Gather inspects the real files behind each volume of vmi and returns the
// facts the converter needs, by volume name. Volumes with no file behind
// them (or whose file appears later, like hotplugged ones) get no entry.
//
// Gather changes nothing, except that probing O_DIRECT support of a
// directory creates and removes a temporary file in it, and that with
// ImageVolume it first links the image volumes' files into the classic
// container-disk paths it then reads (LinkImageVolumes).
func (p *Preparer) Gather(ctx context.Context, vmi *v1.VirtualMachineInstance) (map[string]facts.Volume, error) {
	if p.ImageVolume {
		if err := p.LinkImageVolumes(vmi); err != nil {
			return nil, fmt.Errorf("--image-volume: %w", err)
		}
	}
	out := make(map[string]facts.Volume, len(vmi.Spec.Volumes))
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if err := layout.CheckName(vol.Name); err != nil {
			return nil, fmt.Errorf("volume %d: %w", i, err)
		}
		if facts.VirtiofsVolume(vmi, vol.Name) {
			continue
		}
		fv, ok, err := p.gatherVolume(ctx, vmi, i, vol)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		if ok {
			out[vol.Name] = fv
		}
	}
	return out, nil
}

func (p *Preparer) gatherVolume(ctx context.Context, vmi *v1.VirtualMachineInstance, i int, vol *v1.Volume) (facts.Volume, bool, error) {
	l := p.Layout
	var fv facts.Volume
	switch {
	case vol.ContainerDisk != nil:
		img := l.ContainerDiskImage(i)
		format, err := p.ImageFormat(ctx, img)
		if err != nil {
			if _, serr := os.Stat(l.ImageVolume(i)); !p.ImageVolume && serr == nil {
				return fv, false, fmt.Errorf("containerDisk: %w (an image volume is mounted at %s: the pod was made with KubeVirt's ImageVolume feature gate, but the launcher has no --image-volume)", err, l.ImageVolume(i))
			}
			return fv, false, fmt.Errorf("containerDisk: %w", err)
		}
		fv.BackingFormat = format
		// cache=none needs O_DIRECT on the overlay and on its backing file.
		fv.NoDirectIO = !directIOFile(img) || !directIODir(filepath.Dir(l.DiskOverlay(vol.Name)))
		fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(l.DiskOverlay(vol.Name), false)
		return fv, true, nil

	case vol.Ephemeral != nil:
		if vol.Ephemeral.PersistentVolumeClaim == nil {
			return fv, false, errors.New("ephemeral: persistentVolumeClaim is required")
		}
		src, block, err := p.pvcSource(vmi, vol.Name)
		if err != nil {
			return fv, false, fmt.Errorf("ephemeral: %w", err)
		}
		// The disk is a qcow2 overlay (a file) over the raw PVC; Block
		// describes the backing store.
		fv.BackingFormat = "raw"
		fv.Block = block
		fv.NoDirectIO = !directIOFile(src) || !directIODir(filepath.Dir(l.DiskOverlay(vol.Name)))
		fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(l.DiskOverlay(vol.Name), false)
		return fv, true, nil

	case vol.PersistentVolumeClaim != nil || vol.DataVolume != nil:
		if hotpluggable(vol) {
			return p.gatherHotplug(vol.Name)
		}
		src, block, err := p.pvcSource(vmi, vol.Name)
		if err != nil {
			return fv, false, err
		}
		fv.Block = block
		fv.NoDirectIO = !directIOFile(src)
		fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(src, block)
		return fv, true, nil

	case vol.HostDisk != nil:
		src, err := p.hostDiskPath(vol)
		if err != nil {
			return fv, false, err
		}
		fi, err := os.Stat(src)
		switch {
		case err == nil:
			fv.Block = fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0
			fv.NoDirectIO = !directIOFile(src)
			fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(src, fv.Block)
		case errors.Is(err, fs.ErrNotExist) && vol.HostDisk.Type == v1.HostDiskExistsOrCreate:
			fv.NoDirectIO = !directIODir(filepath.Dir(src))
			fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(src, false)
		case errors.Is(err, fs.ErrNotExist):
			return fv, false, fmt.Errorf("hostDisk: image %s does not exist (type %s needs it to)", src, vol.HostDisk.Type)
		default:
			return fv, false, fmt.Errorf("hostDisk: %w", err)
		}
		return fv, true, nil

	case vol.EmptyDisk != nil:
		fv.NoDirectIO = !directIODir(filepath.Dir(l.EmptyDisk(vol.Name)))
		fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(l.EmptyDisk(vol.Name), false)
		return fv, true, nil
	}

	// Everything else that becomes a disk is an ISO or image this package
	// writes; only the directory's O_DIRECT support matters.
	if iso, ok := p.isoPath(vmi, vol); ok {
		fv.NoDirectIO = !directIODir(filepath.Dir(iso))
		return fv, true, nil
	}
	return fv, false, nil
}

// GatherHotplug is Gather for the hotplugged volumes only (a PVC or
// DataVolume marked hotpluggable), the ones a running domain may gain: it
// runs on every Sync, so it does not probe the others again.
func (p *Preparer) GatherHotplug(vmi *v1.VirtualMachineInstance) (map[string]facts.Volume, error) {
	out := map[string]facts.Volume{}
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if !hotpluggable(vol) {
			continue
		}
		if err := layout.CheckName(vol.Name); err != nil {
			return nil, fmt.Errorf("volume %d: %w", i, err)
		}
		fv, ok, err := p.gatherHotplug(vol.Name)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		if ok {
			out[vol.Name] = fv
		}
	}
	return out, nil
}

func hotpluggable(vol *v1.Volume) bool {
	return (vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.Hotpluggable) ||
		(vol.DataVolume != nil && vol.DataVolume.Hotpluggable)
}

// gatherHotplug reports a hotplugged volume once the handler has mounted it.
func (p *Preparer) gatherHotplug(name string) (facts.Volume, bool, error) {
	var fv facts.Volume
	if dev := p.Layout.HotplugBlock(name); isBlockDevice(dev) {
		fv.Block = true
		fv.NoDirectIO = !directIOFile(dev)
		fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(dev, true)
		return fv, true, nil
	}
	f := p.Layout.HotplugFile(name)
	if _, err := os.Stat(f); err != nil {
		return fv, false, nil // not attached yet
	}
	fv.NoDirectIO = !directIOFile(f)
	fv.LogicalBlockSize, fv.PhysicalBlockSize = blockSizes(f, false)
	return fv, true, nil
}

// pvcSource finds a PVC's storage: the block device /dev/<vol> when the
// volume is in block mode (by its status, or because the device node is
// there), else the image file in vmi-disks.
func (p *Preparer) pvcSource(vmi *v1.VirtualMachineInstance, name string) (string, bool, error) {
	dev := p.Layout.BlockDevice(name)
	wantBlock := false
	for _, st := range vmi.Status.VolumeStatus {
		if st.Name == name && st.PersistentVolumeClaimInfo != nil && st.PersistentVolumeClaimInfo.VolumeMode != nil &&
			*st.PersistentVolumeClaimInfo.VolumeMode == k8sv1.PersistentVolumeBlock {
			wantBlock = true
		}
	}
	if isBlockDevice(dev) {
		return dev, true, nil
	}
	if wantBlock {
		return "", false, fmt.Errorf("block volume: %s is not a block device", dev)
	}
	img := p.Layout.PVCDisk(name)
	fi, err := os.Stat(img)
	if err != nil {
		return "", false, fmt.Errorf("neither block device %s nor image %s is there: %w", dev, img, err)
	}
	if !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("%s is not a regular file", img)
	}
	return img, false, nil
}

func isBlockDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0
}

// imageInfo is the part of `qemu-img info --output json` we read.
type imageInfo struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	BackingFilename string `json:"backing-filename"`
	FormatSpecific  struct {
		Type string `json:"type"`
		Data struct {
			DataFile string `json:"data-file"`
		} `json:"data"`
	} `json:"format-specific"`
}

// ImageFormat returns the format of an untrusted disk image ("raw" or
// "qcow2"), refusing anything QEMU should not open as a container disk: other
// formats, qcow2 with a backing file or an external data file (either would
// let the image read host files), and files that are not disk images.
//
// qemu-img runs under a CPU-time limit and an address-space limit
// (MemoryLimit) so that a crafted image cannot exhaust the launcher, as
// KubeVirt does.
func (p *Preparer) ImageFormat(ctx context.Context, path string) (string, error) {
	format, _, err := p.ImageInfo(ctx, path)
	return format, err
}

// ImageInfo is ImageFormat with the image's virtual size (bytes).
func (p *Preparer) ImageInfo(ctx context.Context, path string) (format string, virtualSize int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", 0, fmt.Errorf("image %s does not exist", path)
		}
		return "", 0, err
	}
	isBlock := fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0
	if !fi.Mode().IsRegular() && !isBlock {
		return "", 0, fmt.Errorf("image %s is not a regular file or block device: not a disk image", path)
	}
	if fi.Mode().IsRegular() && fi.Size() == 0 {
		return "", 0, fmt.Errorf("image %s is empty: not a disk image", path)
	}
	info, err := p.qemuImgInfo(ctx, path)
	if err != nil {
		return "", 0, err
	}
	switch info.Format {
	case "raw":
		if fi.Mode().IsRegular() && fi.Size()%512 != 0 {
			return "", 0, fmt.Errorf("image %s: raw image of %d bytes is not a whole number of 512-byte sectors: not a disk image", path, fi.Size())
		}
	case "qcow2":
		if info.BackingFilename != "" {
			return "", 0, fmt.Errorf("image %s: qcow2 with a backing file (%s) is not allowed", path, info.BackingFilename)
		}
		if info.FormatSpecific.Data.DataFile != "" {
			return "", 0, fmt.Errorf("image %s: qcow2 with an external data file (%s) is not allowed", path, info.FormatSpecific.Data.DataFile)
		}
	default:
		return "", 0, fmt.Errorf("image %s: format %q is not supported (only raw, or qcow2 without a backing file)", path, info.Format)
	}
	return info.Format, info.VirtualSize, nil
}

// VirtualSize is the virtual size (bytes) qemu-img reports for the image
// or device at path, whatever its format: the size of a disk in use (a
// volume a migration copies), not an untrusted image.
func (p *Preparer) VirtualSize(ctx context.Context, path string) (int64, error) {
	info, err := p.qemuImgInfo(ctx, path)
	if err != nil {
		return 0, err
	}
	return info.VirtualSize, nil
}

func (p *Preparer) qemuImgInfo(ctx context.Context, path string) (*imageInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// The limits are set by a shell before it execs qemu-img, so they are in
	// force from qemu-img's first instruction (setting them on the child
	// after start would race with it). ulimit -v counts KiB.
	script := `ulimit -t "$1" && ulimit -v "$2" && shift 2 && exec "$@"`
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script, "sh",
		strconv.Itoa(probeCPUSeconds), strconv.FormatInt(p.memoryLimit()/1024, 10),
		p.qemuImg(), "info", "--force-share", "--output", "json", path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctx.Err() != nil {
			return nil, fmt.Errorf("qemu-img info %s: %w", path, ctx.Err())
		}
		return nil, fmt.Errorf("qemu-img info %s: %w: %s", path, err, msg)
	}
	var info imageInfo
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return nil, fmt.Errorf("qemu-img info %s: parse output: %w", path, err)
	}
	return &info, nil
}

// directIOFile reports whether path can be opened with O_DIRECT.
func directIOFile(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}

// directIODir reports whether files created in dir (or, while dir does not
// exist yet, in its nearest existing ancestor: the same file system in every
// layout we use) can be opened with O_DIRECT. Any failure counts as "no":
// cache=writethrough is always safe, cache=none on a file system without
// O_DIRECT is not.
func directIODir(dir string) bool {
	for {
		fi, err := os.Stat(dir)
		if err == nil && fi.IsDir() {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	probe := filepath.Join(dir, ".directio-probe-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(probe, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_DIRECT, 0o600)
	if err != nil {
		_ = os.Remove(probe) // open may fail after creating the file
		return false
	}
	_ = f.Close()
	_ = os.Remove(probe)
	return true
}
