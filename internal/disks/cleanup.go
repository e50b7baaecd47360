package disks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// isoPath is where Prepare writes the ISO of vol, if vol is one.
func (p *Preparer) isoPath(vmi *v1.VirtualMachineInstance, vol *v1.Volume) (string, bool) {
	l := p.Layout
	switch {
	case vol.CloudInitNoCloud != nil:
		if layout.CheckName(vmi.Namespace) != nil || layout.CheckName(vmi.Name) != nil {
			return "", false
		}
		return l.CloudInitNoCloudISO(vmi.Namespace, vmi.Name), true
	case vol.CloudInitConfigDrive != nil:
		if layout.CheckName(vmi.Namespace) != nil || layout.CheckName(vmi.Name) != nil {
			return "", false
		}
		return l.CloudInitConfigDriveISO(vmi.Namespace, vmi.Name), true
	case vol.ConfigMap != nil:
		return l.ConfigMapISO(vol.Name), true
	case vol.Secret != nil:
		return l.SecretISO(vol.Name), true
	case vol.DownwardAPI != nil:
		return l.DownwardAPIISO(vol.Name), true
	case vol.ServiceAccount != nil:
		return l.ServiceAccountISO(), true
	case vol.Sysprep != nil:
		return l.SysprepISO(vol.Name), true
	}
	return "", false
}

// Cleanup removes what Prepare makes for vmi: overlays, empty disks and ISOs,
// with any temporary files a crash left beside them, and the per-volume and
// per-VMI directories once empty. It never removes backing images, host disk
// images (they hold data that outlives the VMI) or the config sources.
func (p *Preparer) Cleanup(vmi *v1.VirtualMachineInstance) error {
	var errs []error
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if err := layout.CheckName(vol.Name); err != nil {
			errs = append(errs, fmt.Errorf("volume %d: %w", i, err))
			continue
		}
		file, dirs, ok := p.madeFor(vmi, vol)
		if !ok {
			continue
		}
		errs = append(errs, removeMade(file, dirs))
	}
	return errors.Join(errs...)
}

// madeFor names the file Prepare makes for vol, and the directories it may
// create for it (removed when empty, innermost first). ok is false for
// volumes Prepare makes nothing for (or whose files it never removes, such
// as host disks).
func (p *Preparer) madeFor(vmi *v1.VirtualMachineInstance, vol *v1.Volume) (file string, dirs []string, ok bool) {
	l := p.Layout
	switch {
	case vol.ContainerDisk != nil, vol.Ephemeral != nil:
		file = l.DiskOverlay(vol.Name)
		return file, []string{filepath.Dir(file)}, true
	case vol.EmptyDisk != nil:
		return l.EmptyDisk(vol.Name), nil, true
	case vol.DownwardMetrics != nil:
		return l.DownwardMetricsDisk(), nil, true
	}
	iso, ok := p.isoPath(vmi, vol)
	if !ok {
		return "", nil, false
	}
	if vol.CloudInitNoCloud != nil || vol.CloudInitConfigDrive != nil {
		dirs = []string{filepath.Dir(iso), filepath.Dir(filepath.Dir(iso))}
	}
	return iso, dirs, true
}

// removeMade removes a file Prepare made, its temporaries, and the given
// directories when they are empty.
func removeMade(file string, dirs []string) error {
	errs := []error{removeWithTemps(file)}
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !isNotEmpty(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeWithTemps removes file and the temporaries createAtomic and writeISO
// name after it.
func removeWithTemps(file string) error {
	var errs []error
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	dir, base := filepath.Split(file)
	for _, pat := range []string{"." + base + ".tmp-*", "." + base + ".ws-*"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, t := range m {
			if err := os.RemoveAll(t); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func isNotEmpty(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && (errors.Is(pe.Err, syscall.ENOTEMPTY) || errors.Is(pe.Err, syscall.EEXIST))
}
