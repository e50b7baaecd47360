package userstorage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

func TestParseVolumeFlag(t *testing.T) {
	for _, tc := range []struct {
		in, name, path, size string
		err                  string
	}{
		{in: "data=/srv/data.img", name: "data", path: "/srv/data.img"},
		{in: "data=/srv/data.img,size=10Gi", name: "data", path: "/srv/data.img", size: "10Gi"},
		{in: "data=/dev/sdb", name: "data", path: "/dev/sdb"},
		{in: "data", err: "want NAME=PATH"},
		{in: "=/x", err: "want NAME=PATH"},
		{in: "data=", err: "want NAME=PATH"},
		{in: "data=rel/x.img", err: `path "rel/x.img" must be absolute`},
		{in: "data=/x,size=0", err: "positive quantity"},
		{in: "data=/x,size=lots", err: "positive quantity"},
		{in: "data=/x,mode=rw", err: `unknown option "mode=rw"`},
		{in: "data=/x,size=1Ei", err: "more than"},
	} {
		m, err := ParseVolumeFlag(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		got := ""
		if m.Size != nil {
			got = m.Size.String()
		}
		if m.Name != tc.name || m.Path != tc.path || got != tc.size {
			t.Errorf("%q: got %+v size %q", tc.in, m, got)
		}
	}
}

func vmiWithVolumes(vols ...v1.Volume) *v1.VirtualMachineInstance {
	v := &v1.VirtualMachineInstance{}
	v.Spec.Volumes = vols
	return v
}

func pvcVol(name, claim string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
}

func dvVol(name, dv string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: dv}}}
}

func hostDiskVol(name, path string, typ v1.HostDiskType, capacity string) v1.Volume {
	hd := &v1.HostDisk{Path: path, Type: typ}
	if capacity != "" {
		hd.Capacity = resource.MustParse(capacity)
	}
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostDisk: hd}}
}

func vmWithTemplate(name, size string) *v1.VirtualMachine {
	vm := &v1.VirtualMachine{}
	t := v1.DataVolumeTemplateSpec{Spec: cdiv1.DataVolumeSpec{Storage: &cdiv1.StorageSpec{}}}
	t.Name = name
	t.Spec.Storage.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceStorage: resource.MustParse(size)}
	vm.Spec.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{t}
	return vm
}

func sized(name, path, size string) VolumeMap {
	m := VolumeMap{Name: name, Path: path}
	if size != "" {
		q := resource.MustParse(size)
		m.Size = &q
	}
	return m
}

// TestPlanStorage: which user storage a run needs, and where a missing
// file's size comes from, decided from the manifest and --volume alone.
func TestPlanStorage(t *testing.T) {
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		vm   *v1.VirtualMachine
		maps []VolumeMap
		hp   HostPaths
		want []Spec // volume, field, path, kind, create, allowed
		err  []string
	}{
		{name: "hostDisk Disk is used in place",
			vmi: vmiWithVolumes(hostDiskVol("d", "/srv/d.img", v1.HostDiskExists, "")), hp: HostPaths{Dirs: []string{"/srv"}},
			want: []Spec{{volume: "d", field: "spec.volumes[0].hostDisk.path", path: "/srv/d.img", kind: hostDiskFile, allowed: "/srv"}}},
		{name: "hostDisk DiskOrCreate is created with its capacity",
			vmi: vmiWithVolumes(hostDiskVol("d", "/srv/d.img", v1.HostDiskExistsOrCreate, "10Mi")), hp: HostPaths{Dirs: []string{"/srv/"}},
			want: []Spec{{volume: "d", field: "spec.volumes[0].hostDisk.path", path: "/srv/d.img", kind: hostDiskFile, create: 10 << 20, allowed: "/srv"}}},
		{name: "hostDisk in a subdirectory of the nearest allowed directory",
			vmi: vmiWithVolumes(hostDiskVol("d", "/srv/vm/a/d.img", v1.HostDiskExists, "")), hp: HostPaths{Dirs: []string{"/srv", "/srv/vm", "/srv/vm2"}},
			want: []Spec{{volume: "d", field: "spec.volumes[0].hostDisk.path", path: "/srv/vm/a/d.img", kind: hostDiskFile, allowed: "/srv/vm"}}},
		{name: "hostDisk without --allow-host-path names the volume, the path and the flag",
			vmi: vmiWithVolumes(hostDiskVol("data", "/srv/vm/data.img", v1.HostDiskExists, "")),
			err: []string{`spec.volumes[0].hostDisk.path /srv/vm/data.img (volume "data") is not under a directory allowed with --allow-host-path: add --allow-host-path /srv/vm`}},
		{name: "hostDisk beside the allowed directory",
			vmi: vmiWithVolumes(hostDiskVol("data", "/srv/vm2/data.img", v1.HostDiskExistsOrCreate, "1Mi")), hp: HostPaths{Dirs: []string{"/srv/vm"}},
			err: []string{"/srv/vm2/data.img", "add --allow-host-path /srv/vm2"}},
		{name: "hostDisk leaving the allowed directory with ..",
			vmi: vmiWithVolumes(hostDiskVol("data", "/srv/vm/../../etc/shadow", v1.HostDiskExists, "")), hp: HostPaths{Dirs: []string{"/srv/vm"}},
			err: []string{"/srv/vm/../../etc/shadow", "add --allow-host-path /etc"}},
		{name: "hostDisk that is the allowed directory",
			vmi: vmiWithVolumes(hostDiskVol("data", "/srv/vm", v1.HostDiskExists, "")), hp: HostPaths{Dirs: []string{"/srv/vm"}},
			err: []string{"is not under a directory allowed"}},
		{name: "a relative --allow-host-path",
			vmi: vmiWithVolumes(hostDiskVol("data", "/srv/vm/d.img", v1.HostDiskExists, "")), hp: HostPaths{Dirs: []string{"srv"}},
			err: []string{`--allow-host-path "srv": must be an absolute path`}},
		{name: "a PVC without a mapping names the volume and the flag",
			vmi: vmiWithVolumes(pvcVol("data", "claim1")),
			err: []string{"spec.volumes[0]", `persistentVolumeClaim "claim1"`, "--volume claim1=PATH"}},
		{name: "a DataVolume without a mapping, in a VM",
			vmi: vmiWithVolumes(dvVol("root", "dv1")), vm: vmWithTemplate("dv1", "1Gi"),
			err: []string{"spec.template.spec.volumes[0]", `dataVolume "dv1"`, "--volume dv1=PATH"}},
		{name: "a mapped PVC must exist without a size",
			vmi: vmiWithVolumes(pvcVol("data", "claim1")), maps: []VolumeMap{sized("claim1", "/srv/c.img", "")},
			want: []Spec{{volume: "data", field: "--volume claim1", path: "/srv/c.img", kind: pvcStorage}}},
		{name: "size= gives a PVC its size, aligned down to 1Mi as KubeVirt does",
			vmi: vmiWithVolumes(pvcVol("data", "claim1")), maps: []VolumeMap{sized("claim1", "/srv/c.img", "5000000")},
			want: []Spec{{volume: "data", field: "--volume claim1", path: "/srv/c.img", kind: pvcStorage, create: 4 << 20}}},
		{name: "a size under 1Mi",
			vmi: vmiWithVolumes(pvcVol("data", "claim1")), maps: []VolumeMap{sized("claim1", "/srv/c.img", "1000")},
			err: []string{"--volume claim1: size 1k is less than 1Mi"}},
		{name: "a DataVolume gets its template's storage request",
			vmi: vmiWithVolumes(dvVol("root", "dv1")), vm: vmWithTemplate("dv1", "2Gi"), maps: []VolumeMap{sized("dv1", "/srv/dv.img", "")},
			want: []Spec{{volume: "root", field: "--volume dv1", path: "/srv/dv.img", kind: pvcStorage, create: 2 << 30}}},
		{name: "a DataVolume's http source fills a missing file",
			vmi: vmiWithVolumes(dvVol("root", "dv1")), vm: func() *v1.VirtualMachine {
				vm := vmWithTemplate("dv1", "2Gi")
				vm.Spec.DataVolumeTemplates[0].Spec.Source = &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://x/img"}}
				return vm
			}(), maps: []VolumeMap{sized("dv1", "/srv/dv.img", "")},
			want: []Spec{{volume: "root", field: "--volume dv1", path: "/srv/dv.img", kind: pvcStorage, create: 2 << 30, dvField: "spec.dataVolumeTemplates[0].spec.source"}}},
		{name: "a DataVolume source vlctl cannot import is refused by name",
			vmi: vmiWithVolumes(dvVol("root", "dv1")), vm: func() *v1.VirtualMachine {
				vm := vmWithTemplate("dv1", "2Gi")
				vm.Spec.DataVolumeTemplates[0].Spec.Source = &cdiv1.DataVolumeSource{S3: &cdiv1.DataVolumeSourceS3{URL: "s3://b/img"}}
				return vm
			}(), maps: []VolumeMap{sized("dv1", "/srv/dv.img", "")},
			err: []string{"spec.dataVolumeTemplates[0].spec.source.s3: vlctl does not import this source"}},
		{name: "a DataVolume sourceRef is refused",
			vmi: vmiWithVolumes(dvVol("root", "dv1")), vm: func() *v1.VirtualMachine {
				vm := vmWithTemplate("dv1", "2Gi")
				vm.Spec.DataVolumeTemplates[0].Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Name: "fedora"}
				return vm
			}(), maps: []VolumeMap{sized("dv1", "/srv/dv.img", "")},
			err: []string{"spec.dataVolumeTemplates[0].spec.sourceRef: a DataSource exists only in a cluster"}},
		{name: "size= wins over the template",
			vmi: vmiWithVolumes(dvVol("root", "dv1")), vm: vmWithTemplate("dv1", "2Gi"), maps: []VolumeMap{sized("dv1", "/srv/dv.img", "3Gi")},
			want: []Spec{{volume: "root", field: "--volume dv1", path: "/srv/dv.img", kind: pvcStorage, create: 3 << 30}}},
		{name: "an ephemeral PVC is only read: never created",
			vmi: vmiWithVolumes(v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
				PersistentVolumeClaim: &k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "base"}}}}),
			maps: []VolumeMap{sized("base", "/srv/base.img", "1Gi")},
			want: []Spec{{volume: "e", field: "--volume base", path: "/srv/base.img", kind: pvcStorage}}},
		{name: "a mapping nothing uses",
			vmi: vmiWithVolumes(pvcVol("data", "claim1")), maps: []VolumeMap{sized("claim1", "/a", ""), sized("other", "/b", "")},
			err: []string{`--volume other: the manifest has no persistentVolumeClaim or dataVolume named "other"`}},
		{name: "a mapping given twice",
			vmi: vmiWithVolumes(pvcVol("data", "claim1")), maps: []VolumeMap{sized("claim1", "/a", ""), sized("claim1", "/b", "")},
			err: []string{"--volume claim1: given twice"}},
		{name: "hotplug",
			vmi: vmiWithVolumes(v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "x", Hotpluggable: true}}}),
			err: []string{"spec.volumes[0].dataVolume.hotpluggable"}},
		{name: "other volumes need nothing",
			vmi: vmiWithVolumes(v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Plan(tc.vmi, tc.vm, tc.maps, tc.hp)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("no error; plan %+v", got)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("plan %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.volume != w.volume || g.field != w.field || g.path != w.path || g.kind != w.kind || g.create != w.create || g.dvField != w.dvField || g.allowed != w.allowed {
					t.Errorf("plan[%d] = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func launcherIDs(t *testing.T) vmuser.User {
	t.Helper()
	testenv.Root(t, "acts as the launcher's user")
	uid, gid, err := pod.LookupUser(launchertest.TestUser)
	if err != nil {
		t.Fatal(err)
	}
	return vmuser.User{UID: uid, GID: gid, Name: launchertest.TestUser}
}

// TestOpenUserDisk: the real file system decisions for the user's storage,
// with the real launcher user: what is created, what is refused, and that
// the ACL entry is taken out again.
func TestOpenUserDisk(t *testing.T) {
	o := launcherIDs(t)
	var msgs bytes.Buffer
	logf := func(f string, a ...any) { msgs.WriteString(strings.TrimSpace(strings.ReplaceAll(f, "%", "")) + "\n") }

	t.Run("DiskOrCreate makes a sparse file of the capacity at the user's path and keeps it", func(t *testing.T) {
		dir := testenv.OpenDir(t)
		path := filepath.Join(dir, "new.img")
		d, err := Spec{volume: "v", field: "f", path: path, kind: hostDiskFile, create: 48 << 20, sizeFrom: "cap", allowed: dir}.Open(o, logf)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != 48<<20 || st.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20 {
			t.Errorf("size %d, %d blocks: want 48Mi, sparse", st.Size(), st.Sys().(*syscall.Stat_t).Blocks)
		}
		if !d.created || !o.CanReadWrite(path) {
			t.Errorf("created %v, accessible %v", d.created, o.CanReadWrite(path))
		}
		d.Release(logf)
		if _, err := os.Stat(path); err != nil {
			t.Errorf("file gone after release: %v", err)
		}
		if o.CanReadWrite(path) {
			t.Error("the launcher's user still has access after the run")
		}
	})

	t.Run("an existing file: ACL entry granted, then removed, mode as before", func(t *testing.T) {
		dir := testenv.OpenDir(t)
		path := filepath.Join(dir, "old.img")
		if err := os.WriteFile(path, []byte("data"), 0o640); err != nil {
			t.Fatal(err)
		}
		d, err := Spec{volume: "v", field: "f", path: path, kind: hostDiskFile, create: 1 << 20, allowed: dir}.Open(o, logf)
		if err != nil {
			t.Fatal(err)
		}
		if d.created || d.grant == nil || !o.CanReadWrite(path) {
			t.Fatalf("created %v, grant %v, accessible %v", d.created, d.grant != nil, o.CanReadWrite(path))
		}
		d.Release(logf)
		st, _ := os.Stat(path)
		if st.Mode().Perm() != 0o640 {
			t.Errorf("mode %v after the run, want 0640", st.Mode().Perm())
		}
		f, _ := os.Open(path)
		defer f.Close()
		if acl, _ := ACL(f); acl != nil {
			t.Errorf("ACL left: %v", acl)
		}
		if b, _ := os.ReadFile(path); string(b) != "data" {
			t.Errorf("file holds %q", b)
		}
	})

	t.Run("a failed run removes the file it created, not one it found", func(t *testing.T) {
		dir := testenv.OpenDir(t)
		path := filepath.Join(dir, "new.img")
		d, err := Spec{path: path, kind: pvcStorage, create: 1 << 20, sizeFrom: "s"}.Open(o, logf)
		if err != nil {
			t.Fatal(err)
		}
		d.RemoveCreated()
		d.Release(logf)
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("created file still there: %v", err)
		}
	})

	refused := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the user's path
		spec  Spec
		want  []string
	}{
		{name: "Disk that does not exist", setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "none.img") },
			spec: Spec{field: "spec.volumes[0].hostDisk.path", kind: hostDiskFile}, want: []string{"spec.volumes[0].hostDisk.path", "none.img", "does not exist"}},
		{name: "PVC file missing, no size", setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "none.img") },
			spec: Spec{field: "--volume c", kind: pvcStorage}, want: []string{"--volume c", "none.img", "size=10Gi"}},
		{name: "DiskOrCreate in a missing directory", setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "no", "x.img") },
			spec: Spec{field: "f", kind: hostDiskFile, create: 1 << 20}, want: []string{filepath.Join("no", "x.img"), "no such file"}},
		{name: "a directory the launcher's user owns", setup: func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "theirs")
			os.Mkdir(d, 0o755)
			os.Chown(d, o.UID, o.GID)
			return filepath.Join(d, "x.img")
		}, spec: Spec{field: "f", kind: hostDiskFile, create: 1 << 20}, want: []string{"theirs", "can be changed by user virtlauncher"}},
		{name: "a symlink in a directory the launcher's user owns", setup: func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "theirs")
			os.Mkdir(d, 0o755)
			os.WriteFile(filepath.Join(dir, "target.img"), nil, 0o600)
			os.Symlink(filepath.Join(dir, "target.img"), filepath.Join(d, "link.img"))
			os.Chown(d, o.UID, o.GID)
			return filepath.Join(d, "link.img")
		}, spec: Spec{field: "f", kind: hostDiskFile}, want: []string{"link.img", "can be changed by user virtlauncher"}},
		{name: "a file with two hard links", setup: func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "a.img"), nil, 0o600)
			os.Link(filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img"))
			return filepath.Join(dir, "b.img")
		}, spec: Spec{field: "f", kind: hostDiskFile}, want: []string{"b.img", "2 hard links"}},
		{name: "a directory", setup: func(t *testing.T, dir string) string { return dir },
			spec: Spec{field: "f", kind: pvcStorage}, want: []string{"not a regular file or block device"}},
		{name: "a file QEMU's user cannot reach", setup: func(t *testing.T, dir string) string {
			d := filepath.Join(dir, "closed")
			os.Mkdir(d, 0o700)
			os.WriteFile(filepath.Join(d, "x.img"), nil, 0o600)
			return filepath.Join(d, "x.img")
		}, spec: Spec{field: "f", kind: hostDiskFile}, want: []string{"cannot reach it", "closed is closed to it", "setfacl -m u:virtlauncher:x"}},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			dir := testenv.OpenDir(t)
			path := tc.setup(t, dir)
			before := listTree(t, dir)
			s := tc.spec
			s.path = path
			if s.kind == hostDiskFile {
				s.allowed = dir
			}
			d, err := s.Open(o, logf)
			if err == nil {
				d.Release(logf)
				t.Fatal("opened")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if after := listTree(t, dir); after != before {
				t.Errorf("tree changed:\n%s\nnow:\n%s", before, after)
			}
		})
	}
}

// listTree describes every entry below dir: name, mode and ACL.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			if f, err := os.Open(p); err == nil {
				acl, _ := ACL(f)
				f.Close()
				b.WriteString(" acl=" + string(acl))
			}
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func TestBlankBootDisk(t *testing.T) {
	one, two := uint(1), uint(2)
	v := &v1.VirtualMachineInstance{}
	v.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}, {Name: "data"}}
	made := func(vol string, created bool) *Disk {
		return &Disk{Spec: Spec{volume: vol, path: "/srv/" + vol}, created: created}
	}
	for _, tc := range []struct {
		name  string
		boot  []*uint
		disks []*Disk
		want  string
	}{
		{"first disk created blank", nil, []*Disk{made("root", true)}, "root"},
		{"first disk existed", nil, []*Disk{made("root", false), made("data", true)}, ""},
		{"bootOrder picks the created one", []*uint{&two, &one}, []*Disk{made("root", false), made("data", true)}, "data"},
		{"bootOrder picks the existing one", []*uint{&one, &two}, []*Disk{made("root", false), made("data", true)}, ""},
	} {
		for i := range v.Spec.Domain.Devices.Disks {
			v.Spec.Domain.Devices.Disks[i].BootOrder = nil
			if i < len(tc.boot) {
				v.Spec.Domain.Devices.Disks[i].BootOrder = tc.boot[i]
			}
		}
		h := &Held{disks: tc.disks}
		got := ""
		if d := h.blankBootDisk(v); d != nil {
			got = d.volume
		}
		if got != tc.want {
			t.Errorf("%s: blank boot disk %q, want %q", tc.name, got, tc.want)
		}
	}
}

// openHostDisks plans and opens, as a run does, the storage of a VMI with
// a disk for each of vols.
func openHostDisks(o vmuser.User, status *bytes.Buffer, hp HostPaths, vols ...v1.Volume) (*Held, error) {
	v := vmiWithVolumes(vols...)
	for _, vol := range vols {
		v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: vol.Name})
	}
	h := NewHeld(o, status)
	specs, err := Plan(v, nil, nil, hp)
	if err != nil {
		return h, err
	}
	return h, h.Open(v, specs)
}

// rootSecret is a root-owned 0600 file in its own root-owned 0755
// directory: a stand-in for /etc/shadow.
func rootSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(testenv.OpenDir(t), "shadow")
	if err := os.WriteFile(p, []byte("root:$6$secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostDiskNotAllowed: a manifest's hostDisk outside every directory
// allowed with --allow-host-path (none here) is refused before anything is
// made: the file (a root-owned 0600 stand-in for /etc/shadow) gets no ACL
// entry, and DiskOrCreate creates nothing, not even when another volume
// of the same manifest could be had.
func TestHostDiskNotAllowed(t *testing.T) {
	o := launcherIDs(t)
	secret := rootSecret(t)
	profile := testenv.OpenDir(t) // an /etc/profile.d stand-in
	for _, tc := range []struct {
		name string
		vols []v1.Volume
		want []string
	}{
		{name: "an existing root-owned file", vols: []v1.Volume{hostDiskVol("data", secret, v1.HostDiskExists, "")},
			want: []string{`volume "data"`, secret, "--allow-host-path " + filepath.Dir(secret)}},
		{name: "DiskOrCreate", vols: []v1.Volume{hostDiskVol("data", filepath.Join(profile, "evil.sh"), v1.HostDiskExistsOrCreate, "1Mi")},
			want: []string{`volume "data"`, filepath.Join(profile, "evil.sh"), "--allow-host-path " + profile}},
		{name: "DiskOrCreate then a file", vols: []v1.Volume{
			hostDiskVol("new", filepath.Join(profile, "new.img"), v1.HostDiskExistsOrCreate, "1Mi"),
			hostDiskVol("data", secret, v1.HostDiskExists, "")},
			want: []string{`volume "new"`, `volume "data"`, "--allow-host-path"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := listTree(t, filepath.Dir(secret)) + listTree(t, profile)
			var status bytes.Buffer
			h, err := openHostDisks(o, &status, HostPaths{}, tc.vols...)
			if err == nil {
				h.Release(false)
				t.Fatalf("opened: %s", status.String())
			}
			if testing.Verbose() {
				t.Logf("refused: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if after := listTree(t, filepath.Dir(secret)) + listTree(t, profile); after != before {
				t.Errorf("changed:\n%s\nnow:\n%s", before, after)
			}
		})
	}
}

// TestHostDiskAllowed: with --allow-host-path, a manifest's hostDisk is
// used below the allowed directory, as its resolved path says: a link or a
// ".." that leads out of it is refused, and so are a file of a user other
// than root (or the one who ran vlctl) and a FIFO, each before anything
// is made, with nothing changed inside or outside the directory.
func TestHostDiskAllowed(t *testing.T) {
	o := launcherIDs(t)
	secret := rootSecret(t)
	outside := filepath.Dir(secret)
	allowed := testenv.OpenDir(t)
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(allowed, name)
		if err := os.WriteFile(p, make([]byte, 1<<20), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data := mk("data.img", 0o600)
	theirs := mk("theirs.img", 0o600)
	const nobody = 65534
	for _, err := range []error{
		os.Chown(theirs, nobody, nobody),
		os.Mkdir(filepath.Join(allowed, "sub"), 0o755),
		os.Symlink("sub", filepath.Join(allowed, "inlink")),
		os.Symlink(outside, filepath.Join(allowed, "out")),
		os.Symlink(secret, filepath.Join(allowed, "secret.img")),
		unix.Mkfifo(filepath.Join(allowed, "fifo.img"), 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	hostOwned := filepath.Join(testenv.OpenDir(t), "vm")
	if err := os.Mkdir(hostOwned, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(hostOwned, o.UID, o.GID); err != nil {
		t.Fatal(err)
	}
	disk := func(name, path string) v1.Volume { return hostDiskVol(name, path, v1.HostDiskExists, "") }
	create := func(name, path string) v1.Volume { return hostDiskVol(name, path, v1.HostDiskExistsOrCreate, "1Mi") }

	for _, tc := range []struct {
		name    string
		vols    []v1.Volume
		allow   []string
		owner   int
		created []string // files the run makes (removed again: the guest never ran)
		want    []string // the refusal
	}{
		{name: "a file and a new file below the allowed directory",
			vols: []v1.Volume{disk("data", data), create("new", filepath.Join(allowed, "sub", "new.img"))}, allow: []string{allowed},
			created: []string{filepath.Join(allowed, "sub", "new.img")}},
		{name: "through a link that stays inside", vols: []v1.Volume{create("new", filepath.Join(allowed, "inlink", "new.img"))},
			allow: []string{allowed}, created: []string{filepath.Join(allowed, "sub", "new.img")}},
		{name: "a file of the user who ran vlctl", vols: []v1.Volume{disk("data", theirs)}, allow: []string{allowed}, owner: nobody},
		{name: "out through a directory link", vols: []v1.Volume{disk("data", filepath.Join(allowed, "out", "shadow"))}, allow: []string{allowed},
			want: []string{`volume "data"`, "leads to " + secret, "outside " + allowed}},
		{name: "out through a file link", vols: []v1.Volume{disk("data", filepath.Join(allowed, "secret.img"))}, allow: []string{allowed},
			want: []string{`volume "data"`, "leads to " + secret, "outside " + allowed}},
		{name: "DiskOrCreate out through a link", vols: []v1.Volume{create("new", filepath.Join(allowed, "out", "new.img"))}, allow: []string{allowed},
			want: []string{`volume "new"`, "leads to " + filepath.Join(outside, "new.img")}},
		{name: "out with ..", vols: []v1.Volume{disk("data", filepath.Join(allowed, "..", filepath.Base(outside), "shadow"))}, allow: []string{allowed},
			want: []string{`volume "data"`, "is not under a directory allowed with --allow-host-path", "--allow-host-path " + outside}},
		{name: "a new file made before one that leads out", vols: []v1.Volume{create("new", filepath.Join(allowed, "sub", "new.img")),
			disk("data", filepath.Join(allowed, "out", "shadow"))}, allow: []string{allowed},
			want: []string{`volume "data"`, "leads to " + secret}},
		{name: "another user's file", vols: []v1.Volume{disk("data", theirs)}, allow: []string{allowed},
			want: []string{theirs, "belongs to uid 65534", "only use a file of root"}},
		{name: "a FIFO", vols: []v1.Volume{disk("data", filepath.Join(allowed, "fifo.img"))}, allow: []string{allowed},
			want: []string{"fifo.img", "not a regular file (a FIFO)"}},
		{name: "an allowed directory QEMU's user could change", vols: []v1.Volume{create("new", filepath.Join(hostOwned, "new.img"))},
			allow: []string{hostOwned}, want: []string{"can be changed by user " + o.Name}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := listTree(t, allowed) + listTree(t, outside)
			var status bytes.Buffer
			h, err := openHostDisks(o, &status, HostPaths{Dirs: tc.allow, Owner: tc.owner}, tc.vols...)
			if len(tc.want) > 0 {
				if err == nil {
					h.Release(false)
					t.Fatalf("opened: %s", status.String())
				}
				t.Logf("refused: %v", err)
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range tc.created {
					if _, err := os.Lstat(p); err != nil {
						t.Errorf("%s was not created: %v", p, err)
					}
				}
				for _, d := range h.disks {
					if !o.CanReadWrite(d.real) {
						t.Errorf("%s: QEMU's user cannot read and write it", d.path)
					}
				}
				h.Release(false)
			}
			if after := listTree(t, allowed) + listTree(t, outside); after != before {
				t.Errorf("changed:\n%s\nnow:\n%s", before, after)
			}
		})
	}
}

// TestPlaceBelowBase: a hostDisk is opened, created and removed through
// its allowed directory's descriptor: a link put on the way after check
// looked (here: a directory swapped for a link out) is refused, never
// followed, and nothing outside changes.
func TestPlaceBelowBase(t *testing.T) {
	testenv.Root(t, "root's opens are what is tested")
	secret := rootSecret(t)
	outside := filepath.Dir(secret)
	base := testenv.OpenDir(t)
	if err := os.Symlink(outside, filepath.Join(base, "sub")); err != nil {
		t.Fatal(err)
	}
	before := listTree(t, outside)
	p := place{real: filepath.Join(base, "sub", "shadow"), base: base, rel: "sub/shadow"}
	if f, err := p.openFile(os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
		t.Error("opened the file through a link below the allowed directory")
	} else if !errors.Is(err, safefs.ErrSymlink) {
		t.Errorf("open: %v, want a refused link", err)
	}
	p = place{real: filepath.Join(base, "sub", "new.img"), base: base, rel: "sub/new.img"}
	if f, err := p.openFile(os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
		t.Error("created a file through a link below the allowed directory")
	}
	if err := (place{real: secret, base: base, rel: "sub/shadow"}).remove(); err == nil {
		t.Error("removed a file through a link below the allowed directory")
	}
	if after := listTree(t, outside); after != before {
		t.Errorf("outside changed:\n%s\nnow:\n%s", before, after)
	}
}

// TestStoreVolumes: a VM's dataVolumeTemplates that no --volume maps go
// to the volume store, by namespace and VM name; names that are not DNS
// subdomains (a path in disguise) are refused.
func TestStoreVolumes(t *testing.T) {
	v := vmiWithVolumes(dvVol("root", "dv1"), dvVol("data", "dv2"), dvVol("other", "notemplate"), pvcVol("p", "claim"))
	vm := vmWithTemplate("dv1", "1Gi")
	vm.Spec.DataVolumeTemplates = append(vm.Spec.DataVolumeTemplates, vmWithTemplate("dv2", "1Gi").Spec.DataVolumeTemplates...)
	vm.Name = "fedora"
	got, err := storeVolumes("/var/lib/vl", v, vm, []VolumeMap{sized("dv2", "/srv/dv2.img", "")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "dv1" || got[0].Path != "/var/lib/vl/default/fedora/dv1.img" || !got[0].stored {
		t.Errorf("store mappings %+v, want dv1 alone at /var/lib/vl/default/fedora/dv1.img", got)
	}
	if got, err := storeVolumes("/var/lib/vl", v, nil, nil); err != nil || got != nil {
		t.Errorf("a VMI: %v, %v; want nothing stored", got, err)
	}
	vm.Namespace = "../../etc"
	if _, err := storeVolumes("/var/lib/vl", v, vm, nil); err == nil || !strings.Contains(err.Error(), `metadata.namespace "../../etc"`) {
		t.Errorf("a namespace with a path in it: %v", err)
	}
}
