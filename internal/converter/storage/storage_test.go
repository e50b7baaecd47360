package storage_test

import (
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// withDisk replaces the VMI's disks and volumes with one disk on vol.
func withDisk(d v1.Disk, src v1.VolumeSource) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) {
		if d.Name == "" {
			d.Name = "vol"
		}
		v.Spec.Domain.Devices.Disks = []v1.Disk{d}
		v.Spec.Volumes = []v1.Volume{{Name: d.Name, VolumeSource: src}}
	}
}

func disk(bus v1.DiskBus) v1.Disk {
	return v1.Disk{Name: "vol", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}}
}

func cdrom(bus v1.DiskBus) v1.Disk {
	return v1.Disk{Name: "vol", DiskDevice: v1.DiskDevice{CDRom: &v1.CDRomTarget{Bus: bus}}}
}

func vols(m map[string]facts.Volume) func(*facts.Context) {
	return func(c *facts.Context) { c.Volumes = m }
}

func TestVolumeSources(t *testing.T) {
	capacity := resource.MustParse("1Gi")
	convtest.Run(t, []convtest.Case{
		{Name: "containerDisk raw backing", Contains: []string{
			`<disk type="file" device="disk" model="virtio-non-transitional">`,
			`<driver name="qemu" type="qcow2" cache="none" error_policy="stop" discard="unmap">`,
			`<source file="/var/run/kubevirt-ephemeral-disks/disk-data/containerdisk/disk.qcow2">`,
			`<backingStore type="file">`, `<format type="raw">`, `<source file="/var/run/kubevirt/container-disks/disk_0.img">`,
			`<target dev="vda" bus="virtio">`, `<alias name="ua-containerdisk">`}},
		{Name: "containerDisk qcow2 backing at its volume index", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Volumes = append([]v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}}, v.Spec.Volumes...)
		}, Ctx: vols(map[string]facts.Volume{"containerdisk": {BackingFormat: "qcow2"}}),
			Contains: []string{`<format type="qcow2">`, `disk_1.img`}},
		{Name: "containerDisk bad format", Ctx: vols(map[string]facts.Volume{"containerdisk": {BackingFormat: "vmdk"}}),
			Err: `spec.volumes[0].containerDisk: image format "vmdk" is not raw or qcow2`},
		{Name: "pvc file", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}),
			Contains: []string{`<disk type="file"`, `<source file="/var/run/kubevirt-private/vmi-disks/vol/disk.img">`, `type="raw"`}, Absent: []string{"backingStore", `io="native"`}},
		{Name: "pvc block gets io native", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}),
			Ctx:      vols(map[string]facts.Volume{"vol": {Block: true}}),
			Contains: []string{`<disk type="block"`, `<source dev="/dev/vol">`, `cache="none"`, `io="native"`}, Absent: []string{"name=\"vol\""}},
		{Name: "hotplug pvc", VMI: withDisk(disk(v1.DiskBusSCSI), v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}}),
			Contains: []string{`<source file="/var/run/kubevirt/hotplug-disks/vol.img">`}},
		{Name: "hotplug pvc not in the pod yet: the disk waits", VMI: func(v *v1.VirtualMachineInstance) {
			hp := disk(v1.DiskBusSCSI)
			hp.Name = "hp"
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, hp)
			v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "hp", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}}})
			v.Status.VolumeStatus = []v1.VolumeStatus{{Name: "hp", Phase: v1.HotplugVolumeAttachedToNode, HotplugVolume: &v1.HotplugVolumeStatus{}}}
		}, Contains: []string{`<alias name="ua-containerdisk">`}, Absent: []string{"ua-hp", "hotplug-disks"}},
		{Name: "hotplug pvc mounted into the pod", VMI: func(v *v1.VirtualMachineInstance) {
			withDisk(disk(v1.DiskBusSCSI), v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}})(v)
			v.Status.VolumeStatus = []v1.VolumeStatus{{Name: "vol", Phase: v1.HotplugVolumeMounted, HotplugVolume: &v1.HotplugVolumeStatus{}}}
		}, Contains: []string{`<source file="/var/run/kubevirt/hotplug-disks/vol.img">`, `<target dev="sda" bus="scsi">`, `unit="0"`}},
		{Name: "CD-ROM whose hotplug medium is not in the pod yet: an empty drive", VMI: func(v *v1.VirtualMachineInstance) {
			withDisk(cdrom(v1.DiskBusSATA), v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv", Hotpluggable: true}})(v)
			v.Status.VolumeStatus = []v1.VolumeStatus{{Name: "vol", Phase: v1.VolumePending, HotplugVolume: &v1.HotplugVolumeStatus{}}}
		}, Contains: []string{`<disk device="cdrom">`, `<alias name="ua-vol">`}, Absent: []string{"hotplug-disks"}},
		{Name: "hotplug block dataVolume", VMI: withDisk(disk(v1.DiskBusSCSI), v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv", Hotpluggable: true}}),
			Ctx: vols(map[string]facts.Volume{"vol": {Block: true}}), Contains: []string{`<source dev="/var/run/kubevirt/hotplug-disks/vol">`}},
		{Name: "dataVolume", VMI: withDisk(disk(v1.DiskBusSATA), v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/vmi-disks/vol/disk.img">`, `<target dev="sda" bus="sata">`}, Absent: []string{`device="disk" model=`}},
		{Name: "preallocated: no discard, io native", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}),
			Ctx: vols(map[string]facts.Volume{"vol": {Preallocated: true}}), Contains: []string{`io="native"`}, Absent: []string{"discard"}},
		{Name: "ephemeral overlay on the pvc", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{PersistentVolumeClaim: &k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}),
			Contains: []string{`<source file="/var/run/kubevirt-ephemeral-disks/disk-data/vol/disk.qcow2">`, `<source file="/var/run/kubevirt-private/vmi-disks/vol/disk.img">`}},
		{Name: "ephemeral overlay on a block pvc", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{PersistentVolumeClaim: &k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}),
			Ctx: vols(map[string]facts.Volume{"vol": {Block: true}}), Contains: []string{`<backingStore type="block">`, `<source dev="/dev/vol">`}},
		{Name: "hostDisk", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/data/images/disk1.img", Type: v1.HostDiskExistsOrCreate, Capacity: capacity}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/vmi-disks/vol/disk1.img">`, `type="raw"`}},
		{Name: "emptyDisk", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: capacity}}),
			Contains: []string{`<source file="/var/run/libvirt/empty-disks/vol.qcow2">`, `type="qcow2"`}},
		{Name: "cloudInitNoCloud", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config"}}),
			Contains: []string{`<source file="/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi/noCloud.iso">`}},
		{Name: "cloudInitConfigDrive", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "#cloud-config"}}),
			Contains: []string{`/cloud-init-data/default/testvmi/configdrive.iso">`}},
		{Name: "configMap", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/config-map-disks/vol.iso">`}},
		{Name: "secret", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/secret-disks/vol.iso">`}},
		{Name: "serviceAccount", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{ServiceAccount: &v1.ServiceAccountVolumeSource{ServiceAccountName: "sa"}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/service-account-disk/service-account.iso">`}},
		{Name: "downwardAPI", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/downwardapi-disks/vol.iso">`}},
		{Name: "downwardMetrics read-only", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{DownwardMetrics: &v1.DownwardMetricsVolumeSource{}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/downwardapi-disks/vhostmd0">`, "<readonly>"}},
		{Name: "downwardMetrics on sata", VMI: withDisk(disk(v1.DiskBusSATA), v1.VolumeSource{DownwardMetrics: &v1.DownwardMetricsVolumeSource{}}),
			Err: "spec.volumes[0].downwardMetrics: needs a disk on the virtio bus"},
		{Name: "sysprep", VMI: withDisk(cdrom(v1.DiskBusSATA), v1.VolumeSource{Sysprep: &v1.SysprepSource{ConfigMap: &k8sv1.LocalObjectReference{Name: "s"}}}),
			Contains: []string{`<source file="/var/run/kubevirt-private/sysprep-disks/vol.iso">`, `device="cdrom"`, `<target dev="sda" bus="sata" tray="closed">`, "<readonly>"}},
		{Name: "memoryDump refused", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{MemoryDump: &v1.MemoryDumpVolumeSource{}}),
			Err: "spec.volumes[0].memoryDump: not supported"},
		{Name: "no source", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{}), Err: "spec.volumes[0]: no volume source set"},
		{Name: "two sources", VMI: withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}, ConfigMap: &v1.ConfigMapVolumeSource{}}),
			Err: "only one volume source"},
		{Name: "disk without volume", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Volumes = nil },
			Err: `spec.domain.devices.disks[0]: no volume named "containerdisk"`},
		{Name: "empty cdrom drive", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, cdrom(v1.DiskBusSATA))
		}, Contains: []string{`<disk device="cdrom">`, `<driver name="qemu" type="raw" error_policy="stop">`, `<target dev="sda" bus="sata" tray="closed">`}},
		{Name: "path traversal in a volume name", VMI: withDisk(v1.Disk{Name: "..", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}}, v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}),
			Err: "cannot be used as a file name"},
	})
}

func TestDiskOptions(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "no O_DIRECT gives writethrough", Ctx: vols(map[string]facts.Volume{"containerdisk": {NoDirectIO: true}}),
			Contains: []string{`cache="writethrough"`}},
		{Name: "cache none without O_DIRECT", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].Cache = v1.CacheNone },
			Ctx: vols(map[string]facts.Volume{"containerdisk": {NoDirectIO: true}}), Err: "spec.domain.devices.disks[0].cache: none needs O_DIRECT"},
		{Name: "spec cache and io", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Cache = v1.CacheWriteBack
			v.Spec.Domain.Devices.Disks[0].IO = v1.IOThreads
		}, Contains: []string{`cache="writeback"`, `io="threads"`}},
		{Name: "io native needs cache none", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Cache = v1.CacheWriteBack
			v.Spec.Domain.Devices.Disks[0].IO = v1.IONative
		}, Err: "spec.domain.devices.disks[0].io: native needs cache none"},
		{Name: "bad cache", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].Cache = "unsafe" },
			Err: "spec.domain.devices.disks[0].cache"},
		{Name: "readonly serial boot order error policy shareable", VMI: func(v *v1.VirtualMachineInstance) {
			d := &v.Spec.Domain.Devices.Disks[0]
			d.Disk.ReadOnly = true
			d.Serial = "SN-1"
			d.BootOrder = convtest.Ptr(uint(2))
			d.ErrorPolicy = convtest.Ptr(v1.DiskErrorPolicyReport)
			d.Shareable = convtest.Ptr(true)
		}, Contains: []string{"<readonly>", "<serial>SN-1</serial>", `<boot order="2">`, `error_policy="report"`, "<shareable>", `cache="none"`}},
		{Name: "shareable with writeback", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Shareable = convtest.Ptr(true)
			v.Spec.Domain.Devices.Disks[0].Cache = v1.CacheWriteBack
		}, Err: "a shareable disk needs cache none"},
		{Name: "bad error policy", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].ErrorPolicy = convtest.Ptr(v1.DiskErrorPolicy("panic"))
		},
			Err: "spec.domain.devices.disks[0].errorPolicy"},
		{Name: "boot order zero", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].BootOrder = convtest.Ptr(uint(0)) },
			Err: "bootOrder: must be 1 or more"},
		{Name: "custom block size", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].BlockSize = &v1.BlockSize{Custom: &v1.CustomBlockSize{Logical: 512, Physical: 4096}}
		}, Contains: []string{`<blockio logical_block_size="512" physical_block_size="4096">`}},
		{Name: "discard granularity refused", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].BlockSize = &v1.BlockSize{Custom: &v1.CustomBlockSize{Logical: 512, Physical: 4096, DiscardGranularity: convtest.Ptr(uint(4096))}}
		}, Err: "discardGranularity: not supported"},
		{Name: "lun on a file", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Disk = nil
			v.Spec.Domain.Devices.Disks[0].LUN = &v1.LunTarget{Bus: v1.DiskBusSCSI}
		}, Err: "spec.domain.devices.disks[0].lun: needs a block volume"},
		{Name: "bad block size", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].BlockSize = &v1.BlockSize{Custom: &v1.CustomBlockSize{Logical: 4096, Physical: 512}}
		}, Err: "blockSize.custom"},
		{Name: "matching block size", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].BlockSize = &v1.BlockSize{MatchVolume: &v1.FeatureState{}}
		}, Ctx: vols(map[string]facts.Volume{"containerdisk": {LogicalBlockSize: 512, PhysicalBlockSize: 4096}}),
			Contains: []string{`<blockio logical_block_size="512" physical_block_size="4096">`}},
		{Name: "block multiqueue", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.BlockMultiQueue = convtest.Ptr(true)
			v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.MaxSockets = 2, 8
		}, Contains: []string{`queues="2"`}},
		{Name: "lun with reservation", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "vol", DiskDevice: v1.DiskDevice{LUN: &v1.LunTarget{Bus: v1.DiskBusSCSI, Reservation: true}}}}
			v.Spec.Volumes = []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}}}
		}, Ctx: vols(map[string]facts.Volume{"vol": {Block: true}}), Contains: []string{`<disk type="block" device="lun">`,
			`<reservations managed="no">`, `<source type="unix" mode="client" path="/var/run/kubevirt/daemons/pr/pr-helper.sock">`}},
		{Name: "lun on sata", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].Disk = nil
			v.Spec.Domain.Devices.Disks[0].LUN = &v1.LunTarget{Bus: v1.DiskBusSATA}
		}, Err: "a LUN needs the scsi bus"},
		{Name: "cdrom on virtio", VMI: withDisk(cdrom(v1.DiskBusVirtio), v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}),
			Err: "spec.domain.devices.disks[0].cdrom.bus: virtio cannot hold removable media"},
		{Name: "writable cdrom and open tray", VMI: func(v *v1.VirtualMachineInstance) {
			d := cdrom(v1.DiskBusSATA)
			d.CDRom.ReadOnly = convtest.Ptr(false)
			d.CDRom.Tray = v1.TrayStateOpen
			withDisk(d, v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}})(v)
		}, Contains: []string{`tray="open"`}, Absent: []string{"<readonly>"}},
		{Name: "two targets", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks[0].CDRom = &v1.CDRomTarget{}
		}, Err: "only one of disk, lun and cdrom"},
		{Name: "unknown bus", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].Disk.Bus = "ide" },
			Err: `spec.domain.devices.disks[0].disk.bus: "ide" is not one of`},
		{Name: "default bus on amd64 is sata", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.Disks[0].Disk.Bus = "" },
			Contains: []string{`<target dev="sda" bus="sata">`}},
		{Name: "transitional model", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.UseVirtioTransitional = convtest.Ptr(true) },
			Contains: []string{`model="virtio-transitional"`}},
	})
}

func TestTargetNames(t *testing.T) {
	d := func(name string, bus v1.DiskBus, lun bool) v1.Disk {
		if lun {
			return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{LUN: &v1.LunTarget{Bus: bus}}}
		}
		return v1.Disk{Name: name, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "shared sd sequence and scsi units", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = []v1.Disk{d("a", "sata", false), d("b", "virtio", false), d("c", "usb", false), d("e", "scsi", false), d("f", "virtio", false), d("g", "scsi", false)}
			v.Spec.Volumes = nil
			for _, x := range v.Spec.Domain.Devices.Disks {
				v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: x.Name, VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}})
			}
		}, Check: func(t *testing.T, dom *libvirtxml.Domain) {
			want := []string{"sda", "vda", "sdb", "sdc", "vdb", "sdd"}
			for i, w := range want {
				if got := dom.Devices.Disks[i].Target.Dev; got != w {
					t.Errorf("disk %d target %s, want %s", i, got, w)
				}
			}
			for i, unit := range map[int]uint{3: 2, 5: 3} {
				if a := dom.Devices.Disks[i].Address; a == nil || a.Drive == nil || *a.Drive.Unit != unit {
					t.Errorf("disk %d address %+v, want drive unit %d", i, a, unit)
				}
			}
		}},
		{Name: "status pins a target", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = []v1.Disk{d("a", "virtio", false), d("b", "virtio", false)}
			v.Spec.Volumes = []v1.Volume{{Name: "a", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}}, {Name: "b", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}}}
			v.Status.VolumeStatus = []v1.VolumeStatus{{Name: "b", Target: "vda"}}
		}, Check: func(t *testing.T, dom *libvirtxml.Domain) {
			if a, b := dom.Devices.Disks[0].Target.Dev, dom.Devices.Disks[1].Target.Dev; a != "vdb" || b != "vda" {
				t.Errorf("targets %s %s, want vdb vda", a, b)
			}
		}},
		{Name: "duplicate disk", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v.Spec.Domain.Devices.Disks[0])
		}, Err: `spec.domain.devices.disks[1].name: "containerdisk" is used twice`},
	})
}

func TestIOThreads(t *testing.T) {
	twoDisks := func(v *v1.VirtualMachineInstance) {
		v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "data", DedicatedIOThread: convtest.Ptr(true),
			DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}, v1.Disk{Name: "other", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}})
		v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}},
			v1.Volume{Name: "other", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}})
	}
	ids := func(want ...uint) func(t *testing.T, dom *libvirtxml.Domain) {
		return func(t *testing.T, dom *libvirtxml.Domain) {
			for i, w := range want {
				if got := dom.Devices.Disks[i].Driver.IOThread; got == nil || *got != w {
					t.Errorf("disk %d iothread %v, want %d", i, got, w)
				}
			}
		}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "off", Absent: []string{"iothread"}},
		{Name: "shared policy", VMI: func(v *v1.VirtualMachineInstance) {
			twoDisks(v)
			v.Spec.Domain.IOThreadsPolicy = convtest.Ptr(v1.IOThreadsPolicyShared)
		}, Contains: []string{"<iothreads>2</iothreads>"}, Check: ids(1, 2, 1)},
		{Name: "auto policy", VMI: func(v *v1.VirtualMachineInstance) {
			twoDisks(v)
			v.Spec.Domain.IOThreadsPolicy = convtest.Ptr(v1.IOThreadsPolicyAuto)
		}, Contains: []string{"<iothreads>2</iothreads>"}, Check: ids(1, 2, 1)},
		{Name: "supplemental pool refused", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.IOThreadsPolicy = convtest.Ptr(v1.IOThreadsPolicySupplementalPool)
		}, Err: "spec.domain.ioThreadsPolicy: supplementalPool is not supported"},
	})
}

// TestDiskPCIAddress: a virtio disk's pciAddress becomes its <address
// type="pci">, as KubeVirt places it; on another bus it is an error (the
// disk then has no PCI function of its own).
func TestDiskPCIAddress(t *testing.T) {
	withAddr := func(bus v1.DiskBus, addr string) func(*v1.VirtualMachineInstance) {
		d := disk(bus)
		d.Disk.PciAddress = addr
		return withDisk(d, v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}})
	}
	convtest.Run(t, []convtest.Case{
		{Name: "virtio", VMI: withAddr(v1.DiskBusVirtio, "0000:00:0a.0"),
			Contains: []string{`<target dev="vda" bus="virtio">`, `<address type="pci" domain="0x0000" bus="0x00" slot="0x0a" function="0x0">`}},
		{Name: "behind a root port", VMI: withAddr(v1.DiskBusVirtio, "0000:05:00.0"),
			Contains: []string{`<address type="pci" domain="0x0000" bus="0x05" slot="0x00" function="0x0">`}},
		{Name: "sata", VMI: withAddr(v1.DiskBusSATA, "0000:00:0a.0"),
			Err: `spec.domain.devices.disks[0].disk.pciAddress: only a disk on the virtio bus can have a PCI address, not one on "sata"`},
		{Name: "malformed", VMI: withAddr(v1.DiskBusVirtio, "0000:00:2a.0"),
			Err: `spec.domain.devices.disks[0].disk.pciAddress: "0000:00:2a.0": slot 0x2a is above 0x1f`},
	})
}

// cbt sets the VMI's changed block tracking state, as virt-controller does.
func cbt(state v1.ChangedBlockTrackingState, then func(*v1.VirtualMachineInstance)) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) {
		then(v)
		v.Status.ChangedBlockTracking = &v1.ChangedBlockTrackingStatus{State: state}
	}
}

// TestCBTSources: with changed block tracking Initializing or Enabled, a
// PVC, DataVolume or host disk on a file is the qcow2 overlay in the CBT
// directory (its data file the image, in the overlay's header); other
// states, other volume kinds and hotplugged volumes are as without; a
// block volume is refused naming the volume.
func TestCBTSources(t *testing.T) {
	pvc := v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}
	overlay := `<source file="/var/run/kubevirt-private/libvirt/qemu/cbt/vol.qcow2">`
	convtest.Run(t, []convtest.Case{
		{Name: "initializing: the overlay", VMI: cbt(v1.ChangedBlockTrackingInitializing, withDisk(disk(v1.DiskBusVirtio), pvc)),
			Contains: []string{`<disk type="file"`, overlay, `type="qcow2"`}, Absent: []string{"vmi-disks", "backingStore"}},
		{Name: "enabled: the overlay", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusVirtio), pvc)),
			Contains: []string{overlay}},
		{Name: "root: libvirt's own directory", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusVirtio), pvc)),
			Ctx: func(c *facts.Context) { c.NonRoot = false }, Contains: []string{`<source file="/var/lib/libvirt/qemu/cbt/vol.qcow2">`}},
		{Name: "dataVolume", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}})),
			Contains: []string{overlay}},
		{Name: "hostDisk", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/h/d.img", Type: v1.HostDiskExists}})),
			Contains: []string{overlay, `type="qcow2"`}},
		{Name: "pending restart: not yet", VMI: cbt(v1.ChangedBlockTrackingPendingRestart, withDisk(disk(v1.DiskBusVirtio), pvc)),
			Contains: []string{`vmi-disks/vol/disk.img`, `type="raw"`}, Absent: []string{"cbt"}},
		{Name: "disabled", VMI: cbt(v1.ChangedBlockTrackingDisabled, withDisk(disk(v1.DiskBusVirtio), pvc)),
			Absent: []string{"cbt"}},
		{Name: "emptyDisk is not tracked", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusVirtio), v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}})),
			Absent: []string{"cbt"}},
		{Name: "containerDisk is not tracked", VMI: cbt(v1.ChangedBlockTrackingEnabled, func(*v1.VirtualMachineInstance) {}),
			Absent: []string{"cbt"}},
		{Name: "hotplugged is not tracked", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusSCSI), v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}})),
			Contains: []string{`hotplug-disks/vol.img`}, Absent: []string{"cbt"}},
		{Name: "block is refused", VMI: cbt(v1.ChangedBlockTrackingEnabled, withDisk(disk(v1.DiskBusVirtio), pvc)),
			Ctx: vols(map[string]facts.Volume{"vol": {Block: true}}),
			Err: "spec.volumes[0]: changed block tracking needs a filesystem volume"},
	})
}
