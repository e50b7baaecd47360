package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
)

// Volume hotplug as virt-handler does it for a running VMI (virtctl
// addvolume with its defaults: a PVC in file system mode on the SCSI bus):
// it mounts the PVC's disk.img at hotplug-disks/<volume>.img in the pod,
// marks the volume MountedToPod in the VMI's status and syncs; for the
// unplug it syncs the VMI without the volume and unmounts it once the Sync
// succeeded. Both launchers find the disk the same way: a spec volume whose
// PVC is hotpluggable, a status entry with hotplugVolume in phase
// MountedToPod, and an openable file at that path.

// hotplugImageSize is the raw image's size: sparse, so it costs nothing;
// the guest never writes to it.
const hotplugImageSize = 64 << 20

// hotplugStamps are the moments of one plug and unplug.
type hotplugStamps struct {
	plugSent, plugDone, plugSeen       time.Time
	unplugSent, unplugDone, unplugGone time.Time
}

// hotplugCycle plugs volume vol into the running domain and unplugs it
// again, and stamps the Syncs and the first domain event that shows the
// disk, then the first that shows it gone.
func (in *instance) hotplugCycle(ctx context.Context, vol string) (hotplugStamps, error) {
	var s hotplugStamps
	base, err := in.withVolumeStatus()
	if err != nil {
		return s, err
	}
	img := in.lay.HotplugFile(vol)
	if err := makeHotplugImage(img, in.env.owner); err != nil {
		return s, err
	}
	// virt-handler unmounts the volume once the unplug's Sync succeeded;
	// here the file goes whatever happened.
	defer os.Remove(img)
	plugged := withHotplugVolume(base, vol)

	sync := func(v *v1.VirtualMachineInstance, what string) (sent, done time.Time, err error) {
		sctx, cancel := context.WithTimeout(ctx, cmdclient.LongTimeout)
		defer cancel()
		sent = time.Now()
		err = in.client.Sync(sctx, v, cmdclient.HandlerSyncOptions())
		done = time.Now()
		if err != nil {
			return sent, done, in.withLog(fmt.Errorf("%s %s: sync: %w", what, vol, err))
		}
		return sent, done, nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.plugSent, s.plugDone, err = sync(plugged, "hotplug"); err != nil {
		return s, err
	}
	s.plugSeen, err = in.waitEvent(wctx, s.plugSent, "disk "+vol+" attached", func(e stamped) bool { return hasDisk(e, vol) })
	if err != nil {
		return s, err
	}
	if s.unplugSent, s.unplugDone, err = sync(base, "unplug"); err != nil {
		return s, err
	}
	// A domain event (it lists the other disks) without this one. Events
	// come in order, and the one that showed the disk came before the
	// unplug was sent, so a later one without it was read after the
	// detach.
	s.unplugGone, err = in.waitEvent(wctx, s.unplugSent, "disk "+vol+" detached", func(e stamped) bool {
		return len(e.disks) > 0 && !hasDisk(e, vol)
	})
	return s, err
}

func hasDisk(e stamped, name string) bool {
	return slices.ContainsFunc(e.disks, func(d diskSeen) bool { return d.name == name })
}

// withVolumeStatus is the VMI as virt-handler has it once the domain runs:
// every volume in the status with the target the domain gave its disk
// (virt-handler copies them from the domain), from the latest domain
// event.
func (in *instance) withVolumeStatus() (*v1.VirtualMachineInstance, error) {
	disks := in.events.lastDisks()
	if disks == nil {
		return nil, errors.New("hotplug: no domain event has listed the domain's disks yet")
	}
	v := in.vmi.DeepCopy()
	v.Status.VolumeStatus = nil
	for _, vol := range v.Spec.Volumes {
		st := v1.VolumeStatus{Name: vol.Name}
		for _, d := range disks {
			if d.name == vol.Name {
				st.Target = d.target
			}
		}
		v.Status.VolumeStatus = append(v.Status.VolumeStatus, st)
	}
	return v, nil
}

// withHotplugVolume adds volume vol as virt-controller and virt-handler
// have it once the volume is mounted into the pod: a disk on the SCSI bus
// (virtctl addvolume's default), a hotpluggable PVC, and its status
// MountedToPod with the attachment pod's name, but no target yet (the
// launcher picks it) and no persistentVolumeClaimInfo (with a capacity and
// a file system overhead a launcher may also look at growing the disk;
// that is not what is measured here).
func withHotplugVolume(base *v1.VirtualMachineInstance, vol string) *v1.VirtualMachineInstance {
	v := base.DeepCopy()
	v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: vol,
		DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}})
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true,
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: vol}}}})
	v.Status.VolumeStatus = append(v.Status.VolumeStatus, v1.VolumeStatus{Name: vol,
		Phase: v1.HotplugVolumeMounted, Reason: "VolumeMountedToPod", Message: "Volume " + vol + " has been mounted in virt-launcher pod",
		HotplugVolume: &v1.HotplugVolumeStatus{AttachPodName: "hp-volume-bench"}})
	return v
}

// makeHotplugImage makes the volume's disk.img, a sparse raw file, owned
// by the launcher's user, as virt-handler mounts it (QEMU opens it
// read-write).
func makeHotplugImage(path string, o ids) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	if err != nil {
		return fmt.Errorf("hotplug image: %w", err)
	}
	if err := f.Truncate(hotplugImageSize); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("hotplug image: %w", err)
	}
	if err := f.Chown(o.uid, o.gid); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("hotplug image: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("hotplug image: %w", err)
	}
	return nil
}
