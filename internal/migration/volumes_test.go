package migration

import (
	"errors"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

func TestMigratedVolumes(t *testing.T) {
	l := layout.Default()
	fs, block := k8sv1.PersistentVolumeFilesystem, k8sv1.PersistentVolumeBlock
	pvc := func(name string, hotplug bool) v1.Volume {
		return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-claim"}, Hotpluggable: hotplug}}}
	}
	moved := func(name string, src, dst *k8sv1.PersistentVolumeMode) v1.StorageMigratedVolumeInfo {
		return v1.StorageMigratedVolumeInfo{VolumeName: name,
			SourcePVCInfo:      &v1.PersistentVolumeClaimInfo{ClaimName: name + "-old", VolumeMode: src},
			DestinationPVCInfo: &v1.PersistentVolumeClaimInfo{ClaimName: name + "-claim", VolumeMode: dst}}
	}
	file := func(alias, path string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{Alias: &libvirtxml.DomainAlias{Name: "ua-" + alias},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}}
	}
	dev := func(alias, path string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{Alias: &libvirtxml.DomainAlias{Name: "ua-" + alias},
			Source: &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: path}}}
	}
	slice := func(size uint) *libvirtxml.DomainDiskSlices {
		return &libvirtxml.DomainDiskSlices{Slices: []libvirtxml.DomainDiskSlice{{Type: "storage", Size: size}}}
	}
	sliced := func(d libvirtxml.DomainDisk, size uint) libvirtxml.DomainDisk {
		d.Source.Slices = slice(size)
		return d
	}
	withStore := func(d libvirtxml.DomainDisk, store string, s *libvirtxml.DomainDiskSlices) libvirtxml.DomainDisk {
		d.Source.DataStore = &libvirtxml.DomainDiskDataStore{Format: &libvirtxml.DomainDiskFormat{Type: "raw"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: store}, Slices: s}}
		return d
	}
	sizes := map[string]int64{l.PVCDisk("data"): 1 << 30, "/dev/data": 2 << 30, "/store/data.raw": 3 << 30, l.PVCDisk("hp"): 4 << 30, "/hd/disk.img": 5 << 30}
	for _, tc := range []struct {
		name    string
		vols    []v1.Volume
		moved   []v1.StorageMigratedVolumeInfo
		in      []libvirtxml.DomainDisk
		want    []libvirtxml.DomainDisk // nil: unchanged
		wantErr string
	}{
		{name: "no volume migration", vols: []v1.Volume{pvc("data", false)},
			in: []libvirtxml.DomainDisk{file("data", l.PVCDisk("data"))}},
		{name: "a PVC not listed is shared, left alone", vols: []v1.Volume{pvc("data", false), pvc("other", false)},
			moved: []v1.StorageMigratedVolumeInfo{moved("other", &fs, &fs)},
			in:    []libvirtxml.DomainDisk{file("data", l.PVCDisk("data"))},
		},
		{name: "same mode: the slice only", vols: []v1.Volume{pvc("data", false)},
			moved: []v1.StorageMigratedVolumeInfo{moved("data", &fs, &fs)},
			in:    []libvirtxml.DomainDisk{file("data", l.PVCDisk("data"))},
			want:  []libvirtxml.DomainDisk{sliced(file("data", l.PVCDisk("data")), 1<<30)}},
		{name: "modes unknown: the slice only", vols: []v1.Volume{pvc("data", false)},
			moved: []v1.StorageMigratedVolumeInfo{{VolumeName: "data"}},
			in:    []libvirtxml.DomainDisk{file("data", l.PVCDisk("data"))},
			want:  []libvirtxml.DomainDisk{sliced(file("data", l.PVCDisk("data")), 1<<30)}},
		{name: "filesystem to block", vols: []v1.Volume{pvc("data", false)},
			moved: []v1.StorageMigratedVolumeInfo{moved("data", &fs, &block)},
			in:    []libvirtxml.DomainDisk{file("data", l.PVCDisk("data"))},
			want:  []libvirtxml.DomainDisk{sliced(dev("data", "/dev/data"), 1<<30)}},
		{name: "block to filesystem", vols: []v1.Volume{pvc("data", false)},
			moved: []v1.StorageMigratedVolumeInfo{moved("data", &block, &fs)},
			in:    []libvirtxml.DomainDisk{dev("data", "/dev/data")},
			want:  []libvirtxml.DomainDisk{sliced(file("data", l.PVCDisk("data")), 2<<30)}},
		{name: "hotplugged, filesystem to block", vols: []v1.Volume{pvc("hp", true)},
			moved: []v1.StorageMigratedVolumeInfo{moved("hp", &fs, &block)},
			in:    []libvirtxml.DomainDisk{file("hp", l.PVCDisk("hp"))},
			want:  []libvirtxml.DomainDisk{sliced(dev("hp", l.HotplugBlock("hp")), 4<<30)}},
		{name: "hotplugged, block to filesystem", vols: []v1.Volume{pvc("data", true)},
			moved: []v1.StorageMigratedVolumeInfo{moved("data", &block, &fs)},
			in:    []libvirtxml.DomainDisk{dev("data", "/dev/data")},
			want:  []libvirtxml.DomainDisk{sliced(file("data", l.HotplugFile("data")), 2<<30)}},
		{name: "a data store (CBT overlay): its source is sliced and moved", vols: []v1.Volume{pvc("data", false)},
			moved: []v1.StorageMigratedVolumeInfo{moved("data", &fs, &block)},
			in:    []libvirtxml.DomainDisk{withStore(file("data", "/overlay/data.qcow2"), "/store/data.raw", nil)},
			want: []libvirtxml.DomainDisk{func() libvirtxml.DomainDisk {
				d := withStore(file("data", "/overlay/data.qcow2"), "/store/data.raw", slice(3<<30))
				d.Source.DataStore.Source.File, d.Source.DataStore.Source.Block = nil, &libvirtxml.DomainDiskSourceBlock{Dev: "/dev/data"}
				return d
			}()}},
		{name: "a slice already there is kept", vols: []v1.Volume{pvc("data", false)},
			moved: []v1.StorageMigratedVolumeInfo{moved("data", &fs, &fs)},
			in:    []libvirtxml.DomainDisk{sliced(file("data", "/elsewhere"), 7)},
			want:  []libvirtxml.DomainDisk{sliced(file("data", "/elsewhere"), 7)}},
		{name: "a hostDisk listed", vols: []v1.Volume{{Name: "hd", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/x/disk.img", Type: v1.HostDiskExists}}}},
			moved: []v1.StorageMigratedVolumeInfo{{VolumeName: "hd"}},
			in:    []libvirtxml.DomainDisk{file("hd", "/hd/disk.img")},
			want:  []libvirtxml.DomainDisk{sliced(file("hd", "/hd/disk.img"), 5<<30)}},
		{name: "a containerDisk listed is no volume migration", vols: []v1.Volume{{Name: "cd", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "x"}}}},
			moved: []v1.StorageMigratedVolumeInfo{{VolumeName: "cd"}},
			in:    []libvirtxml.DomainDisk{file("cd", "/cd/disk.qcow2")}},
		{name: "a disk without alias", vols: []v1.Volume{pvc("data", false)},
			in:      []libvirtxml.DomainDisk{{Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/x"}}}},
			wantErr: "without an alias"},
		{name: "the size unknown", vols: []v1.Volume{pvc("data", false)},
			moved:   []v1.StorageMigratedVolumeInfo{moved("data", &fs, &fs)},
			in:      []libvirtxml.DomainDisk{file("data", "/nowhere")},
			wantErr: "migrated volume data: no such image /nowhere"},
		{name: "neither file nor block", vols: []v1.Volume{pvc("data", false)},
			moved:   []v1.StorageMigratedVolumeInfo{moved("data", &fs, &fs)},
			in:      []libvirtxml.DomainDisk{{Alias: &libvirtxml.DomainAlias{Name: "ua-data"}, Source: &libvirtxml.DomainDiskSource{Network: &libvirtxml.DomainDiskSourceNetwork{Protocol: "nbd"}}}},
			wantErr: "neither a file nor a block device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Volumes: tc.vols},
				Status: v1.VirtualMachineInstanceStatus{MigratedVolumes: tc.moved}}
			dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: tc.in}}
			before, _ := dom.Marshal()
			changed, err := MigratedVolumes(dom, v, l, func(path string) (int64, error) {
				if s, ok := sizes[path]; ok {
					return s, nil
				}
				return 0, errors.New("no such image " + path)
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := dom.Marshal()
			want := before
			if tc.want != nil {
				want, _ = (&libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: tc.want}}).Marshal()
			}
			if changed != (tc.want != nil) {
				t.Errorf("changed %v, want %v", changed, tc.want != nil)
			}
			if got != want {
				t.Errorf("disks\n%s\nwant\n%s", got, want)
			}
		})
	}
}
