package vmi

import v1 "kubevirt.io/api/core/v1"

// CBTEnabled tells whether the VMI's volumes get changed block tracking:
// virt-controller sets status.changedBlockTracking.state to Initializing
// when a VM that matches the cluster's CBT selectors starts, and
// virt-handler moves it to Enabled once the Domain shows every tracked
// volume on its overlay. Both states mean the overlays are wanted, as in
// KubeVirt's launcher.
func CBTEnabled(v *v1.VirtualMachineInstance) bool {
	s := v.Status.ChangedBlockTracking
	return s != nil && (s.State == v1.ChangedBlockTrackingInitializing || s.State == v1.ChangedBlockTrackingEnabled)
}

// CBTActive tells whether backups may run: the state is Enabled.
func CBTActive(v *v1.VirtualMachineInstance) bool {
	s := v.Status.ChangedBlockTracking
	return s != nil && s.State == v1.ChangedBlockTrackingEnabled
}

// CBTVolume tells whether a volume is tracked when CBT is on: the
// volumes that hold the VM's own data (PVCs, DataVolumes, host disks),
// not container disks, ephemeral or generated ones.
func CBTVolume(vol *v1.Volume) bool {
	return vol.PersistentVolumeClaim != nil || vol.DataVolume != nil || vol.HostDisk != nil
}

// CBTHotplugged tells whether a tracked volume is hotplugged.
func CBTHotplugged(vol *v1.Volume) bool {
	return (vol.PersistentVolumeClaim != nil && vol.PersistentVolumeClaim.Hotpluggable) ||
		(vol.DataVolume != nil && vol.DataVolume.Hotpluggable)
}
