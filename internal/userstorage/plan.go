package userstorage

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/dvimport"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Standalone storage that keeps data: hostDisk volumes at the user's own
// path, and PVCs / DataVolumes mapped to local files or block devices with
// --volume (a VM's DataVolumes without one: files of the volume store,
// store.go). vlctl never copies or deletes such a file (only one it
// created blank for a run that then failed before the guest ran; a
// DataVolume's source is imported into a missing one before, by
// dvimport). The launcher finds it
// where a launcher pod has it (layout.HostDisk, PVCDisk, BlockDevice)
// through a symlink that root makes in a directory it created itself,
// before the tree is handed to the launcher's user; root never resolves
// anything through that link, and QEMU follows it with the launcher user's
// own rights, which an ACL entry on the file grants (see acl.go).
//
// A hostDisk's path comes from the manifest, and a manifest is often
// someone else's (a tutorial's, a colleague's): root must not give a VM the
// host's files, or create files in the host's directories, because a
// manifest asked. As docker run needs -v for a host path, the person
// running vlctl names the directories a manifest may use with
// --allow-host-path; a --volume path is named on the command line and so is
// allowed already.

// HostPaths is what the person running vlctl allowed a manifest's
// hostDisks.
type HostPaths struct {
	// Dirs are the directories a hostDisk may be below, as given.
	Dirs []string
	// Owner is, besides root, the user whose files a hostDisk may use (the
	// one who ran vlctl with sudo); 0: root's alone.
	Owner int
}

// AllowedDir is the directory of hp that path lies below, as written (the
// longest, when several are); ok is false when none. The check on the
// resolved path, which links cannot lead out of, is Spec.check's.
func (hp HostPaths) AllowedDir(path string) (dir string, ok bool) {
	path = filepath.Clean(path)
	for _, d := range hp.Dirs {
		d = filepath.Clean(d)
		if below(path, d) && len(d) >= len(dir) {
			dir, ok = d, true
		}
	}
	return dir, ok
}

// below reports whether path lies below the directory dir (both clean and
// absolute), dir itself excluded.
func below(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// checkDirs refuses an --allow-host-path that is not an absolute path.
func (hp HostPaths) checkDirs() error {
	var errs []error
	for _, d := range hp.Dirs {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("--allow-host-path %q: must be an absolute path", d))
		}
	}
	return errors.Join(errs...)
}

// VolumeMap is one --volume NAME=PATH[,size=SIZE]: the local storage of the
// persistentVolumeClaim or dataVolume NAME.
type VolumeMap struct {
	Name, Path string
	// Size, when set, is the size a missing file is created with.
	Size *resource.Quantity
	// stored: a DataVolume in the volume store, not given with --volume.
	stored bool
}

// ParseVolumeFlag parses NAME=PATH[,size=SIZE].
func ParseVolumeFlag(s string) (VolumeMap, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || rest == "" {
		return VolumeMap{}, fmt.Errorf("--volume %q: want NAME=PATH or NAME=PATH,size=SIZE", s)
	}
	path, opts, _ := strings.Cut(rest, ",")
	m := VolumeMap{Name: name, Path: path}
	if !filepath.IsAbs(path) {
		return m, fmt.Errorf("--volume %s: path %q must be absolute", name, path)
	}
	for _, o := range strings.Split(opts, ",") {
		if o == "" {
			continue
		}
		k, val, _ := strings.Cut(o, "=")
		if k != "size" {
			return m, fmt.Errorf("--volume %s: unknown option %q (only size=SIZE)", name, o)
		}
		q, err := resource.ParseQuantity(val)
		if err != nil || q.Sign() <= 0 {
			return m, fmt.Errorf("--volume %s: size %q: want a positive quantity such as 10Gi", name, val)
		}
		if q.Cmp(*resource.NewQuantity(vmi.MaxDiskCapacityBytes, resource.BinarySI)) > 0 {
			return m, fmt.Errorf("--volume %s: size %s is more than the %d bytes a disk may have", name, val, int64(vmi.MaxDiskCapacityBytes))
		}
		m.Size = &q
	}
	return m, nil
}

// diskKind says what a user's storage may be.
type diskKind int

const (
	hostDiskFile diskKind = iota // a regular file
	pvcStorage                   // a regular file or a block device
)

// Spec is one piece of user storage a run needs: what the manifest (or
// --volume) asks for, before anything is looked at on disk.
type Spec struct {
	volume string // spec.volumes[].name
	field  string // where the path comes from, for errors
	path   string // the user's path, as given
	kind   diskKind
	// create is the size of a missing file (0: it must exist); sizeFrom
	// says where that size comes from.
	create   int64
	sizeFrom string
	// tolerate: a smaller file is made when the file system is short of
	// space by at most KubeVirt's 10 % (PVCs; a hostDisk gets what it asks).
	tolerate bool
	// dv is the DataVolume template whose source fills a missing file
	// (dvimport), and dvField where its source is; nil for a blank one,
	// which is created here like any PVC.
	dv      *v1.DataVolumeTemplateSpec
	dvField string
	// hotplug: a volume plugged into the running VM (vlctl addvolume),
	// linked where a hotplugged volume is mounted in a launcher pod.
	hotplug bool
	// allowed, for a hostDisk, is the --allow-host-path directory the
	// path lies below: the file is used only when its resolved path is
	// below that directory's, and only when it is root's or owner's.
	allowed string
	owner   int
}

// HotplugSpec is the file or block device at path plugged into a running
// VM as volume (vlctl addvolume --file): it must exist.
func HotplugSpec(volume, path string) Spec {
	return Spec{volume: volume, field: "--file", path: path, kind: pvcStorage, hotplug: true}
}

// NewFileSpec is a file the run makes at path as volume (a memory dump),
// created with size bytes when missing; field names it in errors, what
// says what the size is for.
func NewFileSpec(volume, field, path string, size int64, what string) Spec {
	return Spec{volume: volume, field: field, path: path, kind: pvcStorage, create: size, sizeFrom: what}
}

// Plan decides, from the manifest, the --volume mappings and the
// --allow-host-path directories alone, which user files and devices the
// run needs.
func Plan(v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, maps []VolumeMap, hp HostPaths) ([]Spec, error) {
	if err := hp.checkDirs(); err != nil {
		return nil, err
	}
	byName := map[string]VolumeMap{}
	for _, m := range maps {
		if _, dup := byName[m.Name]; dup {
			return nil, fmt.Errorf("--volume %s: given twice", m.Name)
		}
		byName[m.Name] = m
	}
	used := map[string]bool{}
	var specs []Spec
	var errs []error
	for i, vol := range v.Spec.Volumes {
		vp := fmt.Sprintf("spec.volumes[%d]", i)
		if vm != nil {
			vp = "spec.template." + vp
		}
		var claim, what, sizeFrom, dvField string
		var dv *v1.DataVolumeTemplateSpec
		var size int64
		mustExist := false
		switch {
		case vol.HostDisk != nil:
			hd := vol.HostDisk
			s := Spec{volume: vol.Name, field: vp + ".hostDisk.path", path: hd.Path, kind: hostDiskFile, owner: hp.Owner}
			if hd.Type == v1.HostDiskExistsOrCreate {
				s.create, s.sizeFrom = hd.Capacity.Value(), vp+".hostDisk.capacity"
			}
			dir, ok := hp.AllowedDir(hd.Path)
			if !ok {
				errs = append(errs, fmt.Errorf("%s %s (volume %q) is not under a directory allowed with --allow-host-path: add --allow-host-path %s to let the VM use it",
					s.field, hd.Path, vol.Name, filepath.Dir(filepath.Clean(hd.Path))))
				continue
			}
			s.allowed = dir
			specs = append(specs, s)
			continue
		case vol.PersistentVolumeClaim != nil:
			claim, what = vol.PersistentVolumeClaim.ClaimName, "persistentVolumeClaim"
			if vol.PersistentVolumeClaim.Hotpluggable {
				errs = append(errs, fmt.Errorf("%s.persistentVolumeClaim.hotpluggable: vlctl run does not hotplug volumes", vp))
				continue
			}
		case vol.DataVolume != nil:
			claim, what = vol.DataVolume.Name, "dataVolume"
			if vol.DataVolume.Hotpluggable {
				errs = append(errs, fmt.Errorf("%s.dataVolume.hotpluggable: vlctl run does not hotplug volumes", vp))
				continue
			}
			if vm != nil {
				for j, t := range vm.Spec.DataVolumeTemplates {
					if t.Name != claim {
						continue
					}
					if q, ok := dataVolumeRequest(t); ok {
						size = alignDown1MiB(q.Value())
						sizeFrom = fmt.Sprintf("spec.dataVolumeTemplates[%d] storage request %s", j, q.String())
					}
					field := fmt.Sprintf("spec.dataVolumeTemplates[%d].spec", j)
					if t.Spec.SourceRef != nil {
						errs = append(errs, fmt.Errorf("%s.sourceRef: a DataSource exists only in a cluster; give the source itself (http, registry, pvc or blank)", field))
						continue
					}
					kind, err := dvimport.Kind(t.Spec.Source, field+".source")
					if err != nil {
						errs = append(errs, err)
						continue
					}
					if kind != dvimport.KindBlank {
						dv, dvField = &vm.Spec.DataVolumeTemplates[j], field+".source"
					}
				}
			}
		case vol.Ephemeral != nil && vol.Ephemeral.PersistentVolumeClaim != nil:
			// The guest writes to an overlay; the claim is only read.
			claim, what, mustExist = vol.Ephemeral.PersistentVolumeClaim.ClaimName, "ephemeral.persistentVolumeClaim", true
		default:
			continue
		}
		m, ok := byName[claim]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s %q has no local storage: map it to a file or block device with --volume %s=PATH", vp, what, claim, claim))
			continue
		}
		used[claim] = true
		if m.Size != nil {
			size = alignDown1MiB(m.Size.Value())
			sizeFrom = "--volume " + claim + " size " + m.Size.String()
			if size == 0 {
				errs = append(errs, fmt.Errorf("--volume %s: size %s is less than 1Mi", claim, m.Size.String()))
				continue
			}
		}
		if mustExist {
			size, sizeFrom = 0, ""
		}
		specs = append(specs, Spec{volume: vol.Name, field: "--volume " + claim, path: m.Path, kind: pvcStorage,
			create: size, sizeFrom: sizeFrom, tolerate: true, dv: dv, dvField: dvField})
	}
	for _, m := range maps {
		if !used[m.Name] {
			errs = append(errs, fmt.Errorf("--volume %s: the manifest has no persistentVolumeClaim or dataVolume named %q", m.Name, m.Name))
		}
	}
	return specs, errors.Join(errs...)
}

// dataVolumeRequest is the storage a DataVolume template asks for (its
// storage or pvc spec).
func dataVolumeRequest(t v1.DataVolumeTemplateSpec) (resource.Quantity, bool) {
	if s := t.Spec.Storage; s != nil {
		if q, ok := s.Resources.Requests[k8sv1.ResourceStorage]; ok && q.Sign() > 0 {
			return q, true
		}
	}
	if p := t.Spec.PVC; p != nil {
		if q, ok := p.Resources.Requests[k8sv1.ResourceStorage]; ok && q.Sign() > 0 {
			return q, true
		}
	}
	return resource.Quantity{}, false
}

// alignDown1MiB is KubeVirt's size for an image made from a PVC request.
func alignDown1MiB(n int64) int64 { return n - n%(1<<20) }
