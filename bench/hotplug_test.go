package main

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// TestHotplugVMI: the VMI of a hotplug Sync has every volume in its status
// with the target the latest domain event showed, and the new volume as
// virt-handler hands it over: a SCSI disk, a hotpluggable PVC, status
// MountedToPod without a target. The launcher's own reading of the status
// (facts.HotplugVolume) finds it hotplugged and mounted.
func TestHotplugVMI(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Spec.Volumes = []v1.Volume{{Name: "rootdisk"}, {Name: "cloudinit"}}
	in := &instance{vmi: vmi, events: domainEvents{seen: []stamped{
		{typ: "ADDED", disks: []diskSeen{{name: "rootdisk", target: "vdz"}}},
		{typ: "MODIFIED", disks: []diskSeen{{name: "rootdisk", target: "vda"}, {name: "cloudinit", target: "vdb"}}},
		{typ: "K8S"},
	}}}
	base, err := in.withVolumeStatus()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"rootdisk": "vda", "cloudinit": "vdb"}
	if len(base.Status.VolumeStatus) != 2 {
		t.Fatalf("volume status %+v", base.Status.VolumeStatus)
	}
	for _, st := range base.Status.VolumeStatus {
		if st.Target != want[st.Name] || st.HotplugVolume != nil {
			t.Errorf("status %+v, want target %q and no hotplug", st, want[st.Name])
		}
	}
	if len(vmi.Status.VolumeStatus) != 0 {
		t.Errorf("the instance's VMI changed: %+v", vmi.Status.VolumeStatus)
	}

	v := withHotplugVolume(base, "hp0")
	d := v.Spec.Domain.Devices.Disks
	if len(d) != 1 || d[0].Name != "hp0" || d[0].Disk == nil || d[0].Disk.Bus != v1.DiskBusSCSI {
		t.Errorf("disks %+v", d)
	}
	vol := v.Spec.Volumes[len(v.Spec.Volumes)-1]
	if vol.Name != "hp0" || vol.PersistentVolumeClaim == nil || !vol.PersistentVolumeClaim.Hotpluggable || vol.PersistentVolumeClaim.ClaimName != "hp0" {
		t.Errorf("volume %+v", vol)
	}
	if hot, mounted := facts.HotplugVolume(v, "hp0"); !hot || !mounted {
		t.Errorf("hotplug %v, mounted %v: want both", hot, mounted)
	}
	if st := v.Status.VolumeStatus[len(v.Status.VolumeStatus)-1]; st.Target != "" {
		t.Errorf("new volume with target %q: the launcher picks it", st.Target)
	}
	if len(base.Spec.Volumes) != 2 || len(base.Status.VolumeStatus) != 2 {
		t.Error("withHotplugVolume changed its base")
	}

	if !hasDisk(stamped{disks: []diskSeen{{name: "hp0"}}}, "hp0") || hasDisk(stamped{disks: []diskSeen{{name: "hp00"}}}, "hp0") {
		t.Error("hasDisk")
	}
	if _, err := (&instance{vmi: vmi, events: domainEvents{seen: []stamped{{typ: "K8S"}}}}).withVolumeStatus(); err == nil {
		t.Error("withVolumeStatus without a domain event: no error")
	}
}
