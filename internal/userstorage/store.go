package userstorage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/dvimport"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// A VirtualMachine's dataVolumeTemplates are its own volumes, made when
// it is first created and kept until it is deleted. When no --volume maps
// one, vlctl keeps it in the volume store, a tree of root's:
// <store>/<namespace>/<vm name>/<DataVolume name>.img. The directories
// are 0711: QEMU, running as the VM's id, must pass through them to the
// file, whose ACL entry the run adds (disk.go); nobody else can list
// them. Nothing removes a volume there but the person running vlctl.

// DefaultVolumeStore is where a VM's DataVolumes live without --volume.
const DefaultVolumeStore = "/var/lib/virtlauncher/volumes"

// importTimeout bounds the import of one DataVolume (a download of many
// GiB included; a stalled transfer is cut far sooner).
const importTimeout = 6 * time.Hour

// Store is the volume store as one run uses it.
type Store struct {
	// Dir is the store (DefaultVolumeStore), RecordDir the runs' records
	// (a volume a live run uses is refused).
	Dir, RecordDir string
	// ImportCache and ImageCache are where the images DataVolumes are
	// imported from are downloaded and pulled to (dvimport,
	// registrydisk).
	ImportCache, ImageCache string
	// Status receives the imports' progress; nil for none.
	Status io.Writer
}

// Volumes maps each dataVolumeTemplate of vm that a volume of v uses and
// no --volume maps to its file in the store. It only names paths.
func (st Store) Volumes(v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, maps []VolumeMap) ([]VolumeMap, error) {
	return storeVolumes(st.Dir, v, vm, maps)
}

// Prepare readies the volumes of maps and specs (Plan's) for a run before
// its first boot: a store volume a live run of another vlctl uses is
// refused, the store's directories are made, and each DataVolume with a
// source and no file yet is imported.
func (st Store) Prepare(ctx context.Context, maps []VolumeMap, specs []Spec, vm *v1.VirtualMachine) error {
	if err := storeInUse(st.RecordDir, storedPaths(maps)); err != nil {
		return err
	}
	if err := makeStoreDirs(st.Dir, maps); err != nil {
		return err
	}
	return st.importVolumes(ctx, specs, vm)
}

func storeVolumes(store string, v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, maps []VolumeMap) ([]VolumeMap, error) {
	if vm == nil {
		return nil, nil
	}
	mapped := map[string]bool{}
	for _, m := range maps {
		mapped[m.Name] = true
	}
	templates := map[string]bool{}
	for _, t := range vm.Spec.DataVolumeTemplates {
		templates[t.Name] = true
	}
	ns := vmNamespace(vm)
	var out []VolumeMap
	for _, vol := range v.Spec.Volumes {
		if vol.DataVolume == nil || !templates[vol.DataVolume.Name] || mapped[vol.DataVolume.Name] {
			continue
		}
		name := vol.DataVolume.Name
		for what, s := range map[string]string{"metadata.namespace": ns, "metadata.name": vm.Name, "dataVolumeTemplates name " + name: name} {
			if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
				return nil, fmt.Errorf("%s %q: %s (it names a directory of the volume store)", what, s, strings.Join(errs, "; "))
			}
		}
		mapped[name] = true
		out = append(out, VolumeMap{Name: name, Path: filepath.Join(store, ns, vm.Name, name+".img"), stored: true})
	}
	return out, nil
}

func vmNamespace(vm *v1.VirtualMachine) string {
	if vm.Namespace == "" {
		return "default"
	}
	return vm.Namespace
}

// openStore opens the store, a fixed path of root's (safefs.OpenTrusted:
// made when missing, refused when another user could change it or a
// directory above it).
func openStore(store string) (*safefs.Dir, error) {
	d, err := safefs.OpenTrusted(store, 0o711)
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	return d, nil
}

// makeStoreDirs makes the store's directories of the volumes mapped
// there, through the store's descriptor.
func makeStoreDirs(store string, maps []VolumeMap) error {
	var d *safefs.Dir
	defer func() { d.Close() }()
	for _, m := range maps {
		if !m.stored {
			continue
		}
		if d == nil {
			var err error
			if d, err = openStore(store); err != nil {
				return err
			}
		}
		rel, err := filepath.Rel(store, filepath.Dir(m.Path))
		if err != nil {
			return err
		}
		if err := d.MkdirAll(rel, 0o711); err != nil {
			return fmt.Errorf("volume store: %w", err)
		}
	}
	return nil
}

// storeInUse refuses a volume of the store that a live run of another
// vlctl uses (its record names the file): the same VM run twice would have
// two guests write one disk, and a clone would copy a disk a guest is
// writing. Volumes given with --volume are the user's to share (a
// migration's two runs do).
func storeInUse(recordDir string, paths map[string]string) error {
	if len(paths) == 0 {
		return nil
	}
	entries, err := runrecord.List(recordDir)
	if err != nil {
		return fmt.Errorf("the runs using the volume store: %w", err)
	}
	for _, e := range entries {
		if e.Stale {
			continue
		}
		for claim, p := range e.Volumes {
			if what, ok := paths[filepath.Clean(p)]; ok {
				return fmt.Errorf("%s %s is in use by the run of %s (pid %d, its volume %s): stop it first", what, p, e.FullName(), e.PID, claim)
			}
		}
	}
	return nil
}

// storedPaths are the store's volumes of maps, each with what uses it.
func storedPaths(maps []VolumeMap) map[string]string {
	paths := map[string]string{}
	for _, m := range maps {
		if m.stored {
			paths[filepath.Clean(m.Path)] = "DataVolume " + m.Name + ": its volume"
		}
	}
	return paths
}

// importVolumes fills each DataVolume that has a source and no file yet
// (dvimport): the file the user mapped with --volume, or the store's.
// A file that exists is the DataVolume, filled before: used as it is, as
// a cluster uses a DataVolume that exists.
func (st Store) importVolumes(ctx context.Context, specs []Spec, vm *v1.VirtualMachine) error {
	im := &dvimport.Importer{CacheDir: st.ImportCache, Status: st.Status, Terminal: isTerminal(st.Status),
		Images: &registrydisk.Cache{Dir: st.ImageCache, Status: st.Status}}
	for _, s := range specs {
		if s.dv == nil {
			continue
		}
		if err := st.importVolume(ctx, im, s, vm); err != nil {
			return err
		}
	}
	return nil
}

func (st Store) importVolume(ctx context.Context, im *dvimport.Importer, s Spec, vm *v1.VirtualMachine) error {
	// The VM's id is not leased yet; no id of the range may change a
	// directory on the way (Open checks it again for the run's).
	real, err := vmuser.ResolveTrusted(s.path, vmuser.User{UID: -1, GID: -1, Name: "any other"})
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	if _, err := os.Lstat(real); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	dir, err := safefs.Open(filepath.Dir(real))
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	defer dir.Close()
	req := dvimport.Request{DataVolume: s.dv.Name, Field: s.dvField, Source: s.dv.Spec.Source,
		ContentType: s.dv.Spec.ContentType, Size: s.create, Dir: dir, Name: filepath.Base(real)}
	if pvc := s.dv.Spec.Source.PVC; pvc != nil {
		if req.CloneFrom, err = cloneSource(st.Dir, vm, pvc.Namespace, pvc.Name); err != nil {
			return fmt.Errorf("DataVolume %s: %s.pvc: %w", s.dv.Name, s.dvField, err)
		}
		what := fmt.Sprintf("DataVolume %s: %s.pvc: the volume to clone,", s.dv.Name, s.dvField)
		if err := storeInUse(st.RecordDir, map[string]string{req.CloneFrom: what}); err != nil {
			return err
		}
	}
	ictx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	return im.Import(ictx, req)
}

// cloneSource is the store's volume a pvc source names: the DataVolume
// name of one VM of that namespace (a PVC is named for its DataVolume).
func cloneSource(store string, vm *v1.VirtualMachine, ns, name string) (string, error) {
	if ns == "" {
		ns = vmNamespace(vm)
	}
	for _, s := range []string{ns, name} {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return "", fmt.Errorf("%q: %s", s, strings.Join(errs, "; "))
		}
	}
	d, err := openStore(store)
	if err != nil {
		return "", err
	}
	defer d.Close()
	nsDir, err := d.OpenDir(ns)
	if err != nil {
		return "", fmt.Errorf("no volume %s/%s in the volume store %s", ns, name, store)
	}
	defer nsDir.Close()
	f, err := nsDir.OpenFile(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", err
	}
	vms, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return "", err
	}
	var found []string
	for _, owner := range vms {
		rel := filepath.Join(owner, name+".img")
		if vf, err := nsDir.OpenRegular(rel); err == nil {
			vf.Close()
			found = append(found, nsDir.Join(rel))
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no volume %s/%s in the volume store %s (a VM of namespace %s with a DataVolume %s makes one)", ns, name, store, ns, name)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d volumes named %s/%s in the volume store (%s): vlctl cannot tell which to clone", len(found), ns, name, strings.Join(found, ", "))
}

// isTerminal: w is a terminal, where progress is one line redrawn.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
