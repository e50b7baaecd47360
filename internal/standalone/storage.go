package standalone

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/dvimport"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Standalone storage that keeps data: hostDisk volumes at the user's own
// path, and PVCs / DataVolumes mapped to local files or block devices with
// --volume (a VM's DataVolumes without one: files of the volume store,
// volumes.go). vlctl never copies or deletes such a file (only one it
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

// hostPaths is what the person running vlctl allowed a manifest's
// hostDisks.
type hostPaths struct {
	// dirs are the directories a hostDisk may be below, as given.
	dirs []string
	// owner is, besides root, the user whose files a hostDisk may use (the
	// one who ran vlctl with sudo); 0: root's alone.
	owner int
}

// hostPaths is the run's: the --allow-host-path directories and, for a
// guest taken over by migration, the directories of its source's hostDisks
// (that run was allowed them; the manifest is the one it ran).
func (cfg *session) hostPaths() hostPaths {
	hp := hostPaths{dirs: slices.Clone(cfg.AllowHostPaths), owner: cfg.HostPathOwner}
	if cfg.source != nil && cfg.source.VMI != nil {
		for _, vol := range cfg.source.VMI.Spec.Volumes {
			if vol.HostDisk != nil && filepath.IsAbs(vol.HostDisk.Path) {
				hp.dirs = append(hp.dirs, filepath.Dir(vol.HostDisk.Path))
			}
		}
	}
	return hp
}

// allowedDir is the directory of hp that path lies below, as written (the
// longest, when several are); ok is false when none. The check on the
// resolved path, which links cannot lead out of, is diskSpec.check's.
func (hp hostPaths) allowedDir(path string) (dir string, ok bool) {
	path = filepath.Clean(path)
	for _, d := range hp.dirs {
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
func (hp hostPaths) checkDirs() error {
	var errs []error
	for _, d := range hp.dirs {
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

// diskSpec is one piece of user storage a run needs: what the manifest (or
// --volume) asks for, before anything is looked at on disk.
type diskSpec struct {
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

// planStorage decides, from the manifest, the --volume mappings and the
// --allow-host-path directories alone, which user files and devices the
// run needs.
func planStorage(v *v1.VirtualMachineInstance, vm *v1.VirtualMachine, maps []VolumeMap, hp hostPaths) ([]diskSpec, error) {
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
	var specs []diskSpec
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
			s := diskSpec{volume: vol.Name, field: vp + ".hostDisk.path", path: hd.Path, kind: hostDiskFile, owner: hp.owner}
			if hd.Type == v1.HostDiskExistsOrCreate {
				s.create, s.sizeFrom = hd.Capacity.Value(), vp+".hostDisk.capacity"
			}
			dir, ok := hp.allowedDir(hd.Path)
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
		specs = append(specs, diskSpec{volume: vol.Name, field: "--volume " + claim, path: m.Path, kind: pvcStorage,
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

// userDisk is a user's file or device, open, for the run.
type userDisk struct {
	diskSpec
	real string // the resolved path
	// base and rel: see place.
	base, rel string
	f         *os.File
	block     bool
	created   bool
	grant     *userstorage.Grant
}

// place is where check found a piece of user storage.
type place struct {
	real    string // the resolved path
	missing bool   // it is missing and is to be created
	// base, for a hostDisk, is its allowed directory, resolved, and rel
	// the file's path below it: the file is opened, created and removed
	// through base's descriptor without following any link, so a link put
	// on the way after the check cannot lead root out of the directory.
	base, rel string
}

// openFile opens (or creates) the file at p, never following a link at
// its last element nor, below base, anywhere.
func (p place) openFile(flag int, perm os.FileMode) (*os.File, error) {
	if p.base == "" {
		return os.OpenFile(p.real, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, perm)
	}
	dir, err := safefs.Open(p.base)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.OpenFile(p.rel, flag, perm)
}

// remove removes the file at p, as openFile finds it.
func (p place) remove() error {
	if p.base == "" {
		return os.Remove(p.real)
	}
	dir, err := safefs.Open(p.base)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Remove(p.rel)
}

// check resolves the user's path and tells whether open would fail for a
// reason it can see without changing anything: a hostDisk outside its
// allowed directory or not the user's to give, a missing file that is not
// to be created, or a directory QEMU's user cannot enter.
func (s diskSpec) check(o ids) (place, error) {
	real, err := resolveTrusted(s.path, o)
	if err != nil {
		return place{}, fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	p := place{real: real}
	if s.kind == hostDiskFile {
		if p.base, p.rel, err = s.confine(real, o); err != nil {
			return place{}, err
		}
	}
	st, err := os.Lstat(real)
	switch {
	case err == nil:
		if s.kind == hostDiskFile {
			return p, s.checkHostFile(st.Mode(), st.Sys().(*syscall.Stat_t))
		}
		return p, nil
	case !errors.Is(err, fs.ErrNotExist):
		return place{}, fmt.Errorf("%s %s: %w", s.field, s.path, err)
	case s.create > 0:
		if dir := filepath.Dir(real); !asUser(o, "-x", dir) {
			closed := firstClosedDir(real, o)
			return place{}, fmt.Errorf("%s %s: QEMU runs as user %s, which could not reach it: directory %s is closed to it (create it elsewhere, or: setfacl -m u:%s:x %s)", s.field, s.path, o.name, closed, o.name, closed)
		}
		p.missing = true
		return p, nil
	case s.kind == pvcStorage && s.sizeFrom == "":
		return place{}, fmt.Errorf("%s %s: does not exist; give the size to create it with: --volume %s", s.field, s.path, strings.TrimPrefix(s.field, "--volume ")+"="+s.path+",size=10Gi")
	default:
		return place{}, fmt.Errorf("%s %s: does not exist (type %s uses an existing file)", s.field, s.path, v1.HostDiskExists)
	}
}

// confine checks that real, the hostDisk's resolved path, lies below its
// allowed directory, resolved the same way (a link on the way may lead
// anywhere, so what counts is where it leads), and returns that directory
// and the path below it.
func (s diskSpec) confine(real string, o ids) (base, rel string, err error) {
	if s.allowed == "" {
		return "", "", fmt.Errorf("%s %s (volume %q) is not under a directory allowed with --allow-host-path", s.field, s.path, s.volume)
	}
	base, err = resolveTrusted(s.allowed, o)
	if err != nil {
		return "", "", fmt.Errorf("--allow-host-path %s: %w", s.allowed, err)
	}
	if st, err := os.Lstat(base); err != nil {
		return "", "", fmt.Errorf("--allow-host-path %s: %w", s.allowed, err)
	} else if !st.IsDir() {
		return "", "", fmt.Errorf("--allow-host-path %s: not a directory", s.allowed)
	}
	if !below(real, base) {
		return "", "", fmt.Errorf("%s %s (volume %q) leads to %s, outside %s, the directory allowed with --allow-host-path: a symbolic link on the way leaves it", s.field, s.path, s.volume, real, s.allowed)
	}
	rel, err = filepath.Rel(base, real)
	return base, rel, err
}

// checkHostFile refuses, for a hostDisk, what is not a disk image of the
// user's: anything but a regular file with one link (a device, FIFO or
// socket is never opened), and a file of a user other than root or the
// one who ran vlctl.
func (s diskSpec) checkHostFile(mode fs.FileMode, sys *syscall.Stat_t) error {
	switch {
	case !mode.IsRegular():
		return fmt.Errorf("%s %s: not a regular file (%s)", s.field, s.path, fileType(mode))
	case sys.Nlink > 1:
		return fmt.Errorf("%s %s: has %d hard links; vlctl grants QEMU access only to a file with one", s.field, s.path, sys.Nlink)
	case sys.Uid != 0 && int(sys.Uid) != s.owner:
		who := "root (or of the user running vlctl with sudo)"
		if s.owner != 0 {
			who = fmt.Sprintf("root or uid %d, who ran vlctl", s.owner)
		}
		return fmt.Errorf("%s %s: belongs to uid %d; a manifest's hostDisk may only use a file of %s", s.field, s.path, sys.Uid, who)
	}
	return nil
}

// fileType names the kind of a file that is not a regular one.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	default:
		return "not a regular file"
	}
}

// open resolves, checks and (when asked and missing) creates the user's
// storage, and makes sure user o can read and write it. Nothing is left
// changed when it fails.
func (s diskSpec) open(o ids, log func(string, ...any)) (_ *userDisk, err error) {
	d := &userDisk{diskSpec: s}
	p, err := s.check(o)
	if err != nil {
		return nil, err
	}
	d.real, d.base, d.rel = p.real, p.base, p.rel
	var f *os.File
	if p.missing {
		if f, err = s.createFile(p, log); err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.field, s.path, err)
		}
		d.created = true
	} else if f, err = p.openFile(os.O_RDONLY|syscall.O_NONBLOCK, 0); err != nil {
		// O_NONBLOCK: a block device opens at once; the fd is only used
		// for fstat and ACLs.
		return nil, fmt.Errorf("%s %s: %w", s.field, s.path, err)
	}
	d.f = f
	defer func() {
		if err != nil {
			d.removeCreated()
			d.release(log)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sys := st.Sys().(*syscall.Stat_t)
	switch {
	case s.kind == hostDiskFile:
		// Again on what was opened: the path may have changed since
		// check looked.
		if err := s.checkHostFile(st.Mode(), sys); err != nil {
			return nil, err
		}
	case st.Mode().IsRegular():
		if sys.Nlink > 1 {
			return nil, fmt.Errorf("%s %s: has %d hard links; vlctl grants QEMU access only to a file with one", s.field, s.path, sys.Nlink)
		}
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		d.block = true
	default:
		return nil, fmt.Errorf("%s %s: not a regular file or block device", s.field, s.path)
	}
	if st.Mode().IsRegular() && !d.created && s.create > 0 && st.Size() < s.create {
		log("vlctl: %s %s is %d bytes, less than the %d of %s; used as it is\n", s.field, s.path, st.Size(), s.create, s.sizeFrom)
	}
	if !accessibleBy(d.real, o) {
		g, err := userstorage.GrantAccess(f, uint32(o.uid), 6)
		if err != nil {
			return nil, fmt.Errorf("%s %s: give user %s (QEMU) read and write access: %w", s.field, s.path, o.name, err)
		}
		d.grant = g
		if !accessibleBy(d.real, o) {
			dir := firstClosedDir(d.real, o)
			return nil, fmt.Errorf("%s %s: QEMU runs as user %s, which cannot reach it: directory %s is closed to it (move the file, or: setfacl -m u:%s:x %s)", s.field, s.path, o.name, dir, o.name, dir)
		}
	}
	return d, nil
}

// createFile makes a sparse raw image of the asked size, as KubeVirt's
// host-disk code does: a PVC image that does not fit in the free space
// (less a reserve) is made smaller when it falls short by at most 10 %.
func (s diskSpec) createFile(p place, log func(string, ...any)) (*os.File, error) {
	const reserve = 131072 // KubeVirt's default minimumReservePVCBytes
	const toleration = 10  // and lessPVCSpaceToleration (percent)
	size := s.create
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(p.real), &st); err != nil {
		return nil, fmt.Errorf("free space: %w", err)
	}
	avail := int64(st.Bavail)*st.Bsize - reserve
	if size > avail {
		if !s.tolerate || size*(100-toleration)/100 > avail {
			return nil, fmt.Errorf("%s asks for %d bytes, more than the %d free in %s", s.sizeFrom, size, avail, filepath.Dir(p.real))
		}
		log("vlctl: %s: only %d of the %d bytes of %s are free; made it smaller (within KubeVirt's 10 %% toleration)\n", s.path, avail, size, s.sizeFrom)
		size = avail
	}
	f, err := p.openFile(os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		p.remove()
		return nil, err
	}
	log("vlctl: created %s (%d bytes, sparse raw, blank) for %s\n", s.path, size, s.sizeFrom)
	return f, nil
}

// release undoes what open did: the ACL entry, and a file it created
// (only while nothing was written to it: the guest never ran).
func (d *userDisk) release(log func(string, ...any)) {
	if d.f == nil {
		return
	}
	if d.grant != nil {
		if same, err := d.grant.Undo(); err != nil || !same {
			log("vlctl: %s: left its ACL as it is now (the run's entry changed during the run, or %v)\n", d.path, err)
		}
		d.grant = nil
	}
	d.f.Close()
	d.f = nil
}

// recordedGrant is the ACL entry the run added to the file, as the run's
// record keeps it for vlctl gc.
func (d *userDisk) recordedGrant() (runrecord.Grant, bool) {
	if d.grant == nil || d.f == nil {
		return runrecord.Grant{}, false
	}
	fi, err := d.f.Stat()
	if err != nil {
		return runrecord.Grant{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return runrecord.Grant{}, false
	}
	g := d.grant
	return runrecord.Grant{Path: d.real, Dev: uint64(st.Dev), Ino: st.Ino,
		Before: g.Before, After: g.After}, true
}

// removeCreated deletes the file open created, when it is still the same
// file.
func (d *userDisk) removeCreated() {
	if !d.created {
		return
	}
	if d.f != nil {
		st, err1 := d.f.Stat()
		now, err2 := os.Lstat(d.real)
		if err1 != nil || err2 != nil || !os.SameFile(st, now) {
			return
		}
	}
	place{real: d.real, base: d.base, rel: d.rel}.remove()
	d.created = false
}

// link is where the launcher looks for this volume in layout l.
func (d *userDisk) link(l layout.Layout) (string, error) {
	switch {
	case d.hotplug && d.block:
		return l.HotplugBlock(d.volume), nil
	case d.hotplug:
		return l.HotplugFile(d.volume), nil
	case d.kind == hostDiskFile:
		return l.HostDisk(d.volume, d.path)
	case d.block:
		return l.BlockDevice(d.volume), nil
	default:
		return l.PVCDisk(d.volume), nil
	}
}

func openNoFollow(path string) (*os.File, error) {
	// O_NONBLOCK: a block device opens at once; the fd is only used for
	// fstat and ACLs.
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
}

// resolveTrusted resolves the symlinks in path, refusing any directory on
// the way (its own entries included) that user o can change: root must not
// act on a path the launcher's user could swap, or it would write or chown
// whatever that user pointed it at. In a sticky directory (/tmp) o may add
// names but not replace root's, so only an entry owned by o is refused
// there. The last element may be
// missing; a symlink as the last element is followed like the others.
func resolveTrusted(path string, o ids) (string, error) {
	if !filepath.IsAbs(path) {
		return "", errors.New("must be an absolute path")
	}
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		dirSt, err := os.Stat(cur)
		if err != nil {
			return "", err
		}
		next := filepath.Join(cur, name)
		st, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) && len(rest) == 0 {
			if changeable(dirSt, o) {
				return "", fmt.Errorf("directory %s can be changed by user %s, which runs QEMU", cur, o.name)
			}
			return next, nil
		}
		if err != nil {
			return "", err
		}
		if changeable(dirSt, o) && (dirSt.Mode()&os.ModeSticky == 0 || owner(st) == o.uid) {
			return "", fmt.Errorf("%s can be changed by user %s, which runs QEMU", next, o.name)
		}
		if st.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", errors.New("too many symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return cur, nil
}

func owner(st os.FileInfo) int { return int(st.Sys().(*syscall.Stat_t).Uid) }

// changeable reports whether user o can add, remove or rename entries of
// the directory st (by its mode bits; ACLs are not read).
func changeable(st os.FileInfo, o ids) bool {
	sys := st.Sys().(*syscall.Stat_t)
	return changeableBy(int(sys.Uid), int(sys.Gid), st.Mode().Perm(), o)
}

// changeableBy is changeable for a directory with owner uid, group gid and
// permission bits perm.
func changeableBy(uid, gid int, perm os.FileMode, o ids) bool {
	switch {
	case uid == o.uid:
		return true
	case gid == o.gid && perm&0o020 != 0:
		return true
	default:
		return perm&0o002 != 0
	}
}

// asUser runs test(1) as user o with a clean environment: the kernel's
// own answer, ACLs and all.
func asUser(o ids, args ...string) bool {
	cmd := exec.Command("test", args...)
	if p, err := exec.LookPath("test"); err == nil {
		cmd.Path = p
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.credential()}
	return cmd.Run() == nil
}

// accessibleBy reports whether o can open path for reading and writing.
func accessibleBy(path string, o ids) bool { return asUser(o, "-r", path, "-a", "-w", path) }

// firstClosedDir is the first directory on the way to path that o cannot
// enter.
func firstClosedDir(path string, o ids) string {
	dirs := []string{}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
		if d == "/" {
			break
		}
	}
	for _, d := range dirs {
		if !asUser(o, "-x", d) {
			return d
		}
	}
	return filepath.Dir(path)
}

// openDisks opens (and where asked creates) the user's storage the
// manifest and --volume name; on failure nothing is left changed.
func (r *runner) openDisks() error {
	specs, err := planStorage(r.vmi, r.vm, r.cfg.Volumes, r.cfg.hostPaths())
	if err != nil {
		return err
	}
	// Everything that can be seen without changing anything first, so
	// a bad mapping creates nothing.
	for _, s := range specs {
		if _, err := s.check(r.owner); err != nil {
			return err
		}
	}
	// What was created is told once the run has all its disks.
	var msgs strings.Builder
	note := func(format string, a ...any) { fmt.Fprintf(&msgs, format, a...) }
	for _, s := range specs {
		d, err := s.open(r.owner, note)
		if err != nil {
			r.releaseDisks()
			return err
		}
		r.disks = append(r.disks, d)
	}
	if d := r.blankBootDisk(); d != nil {
		fmt.Fprintf(&msgs, "vlctl: warning: the boot disk %s is %s, created blank by this run: nothing boots from it until an image is written to it\n", d.volume, d.path)
	}
	fmt.Fprint(r.cfg.Status, msgs.String())
	return nil
}

// blankBootDisk is the user disk the guest boots from (lowest bootOrder,
// else the first disk) when this run created it empty.
func (r *runner) blankBootDisk() *userDisk {
	disks := r.vmi.Spec.Domain.Devices.Disks
	if len(disks) == 0 {
		return nil
	}
	boot := disks[0]
	var best uint
	for _, d := range disks {
		if d.BootOrder != nil && (best == 0 || *d.BootOrder < best) {
			best, boot = *d.BootOrder, d
		}
	}
	for _, d := range r.disks {
		if d.volume == boot.Name && d.created {
			return d
		}
	}
	return nil
}

// linkDisks puts a symlink to each user disk where the launcher looks for
// it. It runs before the tree is handed to the launcher's user, through
// the work dir's descriptor.
func (r *runner) linkDisks() error {
	for _, d := range r.disks {
		dst, err := d.link(r.layout)
		if err == nil {
			dst, err = r.rel(dst)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", d.field, err)
		}
		if err := r.dir.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
			return fmt.Errorf("%s: %w", d.field, err)
		}
		if err := r.dir.Symlink(d.real, dst); err != nil {
			return fmt.Errorf("%s %s: link it for the launcher: %w", d.field, d.path, err)
		}
	}
	return nil
}

// releaseDisks takes back the access granted and, when the guest never ran,
// removes the files this run created.
func (r *runner) releaseDisks() {
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	for _, d := range r.hot {
		d.release(status)
	}
	r.hot = nil
	for _, d := range r.disks {
		if !r.started {
			d.removeCreated()
		}
		d.release(status)
	}
	r.disks = nil
}

// userPaths rewrites the launcher's view of the user's disks (links in the
// work dir) back to the paths the user gave, in an error for the user.
func (r *runner) userPaths(err error) error {
	if err == nil || len(r.disks)+len(r.hot) == 0 {
		return err
	}
	var pairs []string
	for _, d := range slices.Concat(r.disks, r.hot) {
		if dst, lerr := d.link(r.layout); lerr == nil {
			pairs = append(pairs, dst, d.path+" ("+d.field+")")
		}
	}
	return errors.New(strings.NewReplacer(pairs...).Replace(err.Error()))
}
