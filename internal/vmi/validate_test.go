package vmi

import (
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
)

// validBase exercises most parts Validate looks at and is valid once
// defaulted.
const validBase = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: base
spec:
  domain:
    cpu: {sockets: 1, cores: 2, threads: 1}
    memory: {guest: 1Gi}
    features: {smm: {}}
    firmware:
      bootloader: {efi: {secureBoot: true}}
    devices:
      disks:
      - {name: root, disk: {bus: virtio}, bootOrder: 1}
      - {name: cloudinit, disk: {bus: virtio}}
      - {name: scratch}
      - {name: iso, cdrom: {bus: sata}}
      - {name: host}
      interfaces:
      - name: default
        masquerade: {}
        ports: [{port: 22}, {port: 53, protocol: UDP}, {name: http, port: 80}]
      - {name: secondary, bridge: {}, macAddress: "02:00:00:aa:bb:cc", pciAddress: "0000:00:1f.0"}
  networks:
  - {name: default, pod: {}}
  - {name: secondary, multus: {networkName: br1}}
  volumes:
  - {name: root, containerDisk: {image: "quay.io/a/b:v1"}}
  - {name: cloudinit, cloudInitNoCloud: {userData: "#cloud-config\n"}}
  - {name: scratch, emptyDisk: {capacity: 1Gi}}
  - {name: iso, persistentVolumeClaim: {claimName: iso-pvc}}
  - {name: host, hostDisk: {path: /var/data/disk.img, type: DiskOrCreate, capacity: 1Gi}}
`

func loadBase(t *testing.T) *v1.VirtualMachineInstance {
	t.Helper()
	vmi, err := Load([]byte(validBase), Options{})
	if err != nil {
		t.Fatalf("base does not load: %v", err)
	}
	return vmi
}

func TestValidateBaseIsValid(t *testing.T) {
	vmi := loadBase(t)
	if err := Validate(vmi); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	disk := func(vmi *v1.VirtualMachineInstance, name string) *v1.Disk {
		for i := range vmi.Spec.Domain.Devices.Disks {
			if vmi.Spec.Domain.Devices.Disks[i].Name == name {
				return &vmi.Spec.Domain.Devices.Disks[i]
			}
		}
		panic("no disk " + name)
	}
	vol := func(vmi *v1.VirtualMachineInstance, name string) *v1.Volume {
		for i := range vmi.Spec.Volumes {
			if vmi.Spec.Volumes[i].Name == name {
				return &vmi.Spec.Volumes[i]
			}
		}
		panic("no volume " + name)
	}
	iface := func(vmi *v1.VirtualMachineInstance, i int) *v1.Interface {
		return &vmi.Spec.Domain.Devices.Interfaces[i]
	}
	uintp := func(u uint) *uint { return &u }

	tests := []struct {
		name   string
		mutate func(vmi *v1.VirtualMachineInstance)
		want   string // substring of the error, with the field path
	}{
		{"missing name", func(v *v1.VirtualMachineInstance) { v.Name = "" }, "metadata.name: required"},
		{"name with slash", func(v *v1.VirtualMachineInstance) { v.Name = "a/b" }, `metadata.name: "a/b" is not a valid name`},
		{"name with dot-dot", func(v *v1.VirtualMachineInstance) { v.Name = ".." }, `metadata.name: ".." is not a valid name`},
		{"name too long", func(v *v1.VirtualMachineInstance) { v.Name = strings.Repeat("a", 64) }, "metadata.name: \"aaaa"},
		{"namespace invalid", func(v *v1.VirtualMachineInstance) { v.Namespace = "Big_NS" }, `metadata.namespace: "Big_NS" is not a valid namespace`},
		{"uid missing", func(v *v1.VirtualMachineInstance) { v.UID = "" }, "metadata.uid: required"},
		{"launcher restarts neither on nor off", func(v *v1.VirtualMachineInstance) {
			v.Annotations = map[string]string{AnnotationLauncherRestarts: "no"}
		}, `metadata.annotations[virtlauncher.io/launcher-restarts]: "no": want on or off`},
		{"architecture unknown", func(v *v1.VirtualMachineInstance) { v.Spec.Architecture = "mips" }, `spec.architecture: "mips" is not supported`},
		{"disk without volume", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks, v1.Disk{Name: "foo", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}})
		}, `spec.domain.devices.disks[5].name: "foo" has no matching volume`},
		{"duplicate disk name", func(v *v1.VirtualMachineInstance) { disk(v, "scratch").Name = "root" }, `spec.domain.devices.disks[2].name: "root" is already the name of spec.domain.devices.disks[0]`},
		{"disk name not a DNS label", func(v *v1.VirtualMachineInstance) {
			disk(v, "root").Name = "Root_Disk"
			vol(v, "root").Name = "Root_Disk"
		}, `spec.domain.devices.disks[0].name: "Root_Disk" is not a valid name`},
		{"volume name with path characters", func(v *v1.VirtualMachineInstance) { vol(v, "scratch").Name = "../etc" }, `spec.volumes[2].name: "../etc" is not a valid name`},
		{"duplicate volume", func(v *v1.VirtualMachineInstance) { vol(v, "scratch").Name = "root" }, `spec.volumes[2].name: "root" is already the name of spec.volumes[0]`},
		{"volume without source", func(v *v1.VirtualMachineInstance) { vol(v, "scratch").EmptyDisk = nil }, "spec.volumes[2]: no volume source set"},
		{"volume with two sources", func(v *v1.VirtualMachineInstance) {
			vol(v, "scratch").ContainerDisk = &v1.ContainerDiskSource{Image: "x"}
		}, "spec.volumes[2]: 2 volume sources set"},
		{"disk with two targets", func(v *v1.VirtualMachineInstance) { disk(v, "root").CDRom = &v1.CDRomTarget{} }, "spec.domain.devices.disks[0]: set only one of disk, cdrom and lun"},
		{"unknown bus", func(v *v1.VirtualMachineInstance) { disk(v, "root").Disk.Bus = "ide" }, `spec.domain.devices.disks[0].disk.bus: "ide" is not one of virtio, sata, scsi, usb`},
		{"cdrom on virtio", func(v *v1.VirtualMachineInstance) { disk(v, "iso").CDRom.Bus = "virtio" }, "spec.domain.devices.disks[3].cdrom.bus: virtio is not valid for a CD-ROM"},
		{"read-only sata disk", func(v *v1.VirtualMachineInstance) { disk(v, "scratch").Disk.ReadOnly = true }, "spec.domain.devices.disks[2].disk.readonly: a sata disk cannot be read-only"},
		{"boot order zero", func(v *v1.VirtualMachineInstance) { disk(v, "root").BootOrder = uintp(0) }, "spec.domain.devices.disks[0].bootOrder: must be at least 1"},
		{"boot order repeated across disk and interface", func(v *v1.VirtualMachineInstance) { iface(v, 0).BootOrder = uintp(1) }, "spec.domain.devices.interfaces[0].bootOrder: 1 is already the boot order of spec.domain.devices.disks[0]"},
		{"disk pci address malformed", func(v *v1.VirtualMachineInstance) { disk(v, "root").Disk.PciAddress = "00:1f.0" }, `spec.domain.devices.disks[0].disk.pciAddress: "00:1f.0" is not a PCI address`},
		{"disk pci address on sata", func(v *v1.VirtualMachineInstance) { disk(v, "scratch").Disk.PciAddress = "0000:00:10.0" }, "spec.domain.devices.disks[2].disk.pciAddress: only possible on the virtio bus"},
		{"disk serial characters", func(v *v1.VirtualMachineInstance) { disk(v, "root").Serial = "a b" }, `spec.domain.devices.disks[0].serial: "a b" may contain only`},
		{"cache mode", func(v *v1.VirtualMachineInstance) { disk(v, "root").Cache = "unsafe" }, `spec.domain.devices.disks[0].cache: "unsafe" is not one of`},
		{"volume used by a disk and a filesystem", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "root", Virtiofs: &v1.FilesystemVirtiofs{}}}
		}, `spec.domain.devices.filesystems[0].name: volume "root" is used by a disk too`},
		{"containerDisk image empty", func(v *v1.VirtualMachineInstance) { vol(v, "root").ContainerDisk.Image = "" }, "spec.volumes[0].containerDisk.image: required"},
		{"containerDisk path relative", func(v *v1.VirtualMachineInstance) { vol(v, "root").ContainerDisk.Path = "/disk/../../etc/shadow" }, "spec.volumes[0].containerDisk.path: \"/disk/../../etc/shadow\" must be an absolute path"},
		{"hostDisk path relative", func(v *v1.VirtualMachineInstance) { vol(v, "host").HostDisk.Path = "data/disk.img" }, `spec.volumes[4].hostDisk.path: "data/disk.img" must be an absolute path`},
		{"hostDisk path empty", func(v *v1.VirtualMachineInstance) { vol(v, "host").HostDisk.Path = "" }, "spec.volumes[4].hostDisk.path: required"},
		{"hostDisk type", func(v *v1.VirtualMachineInstance) { vol(v, "host").HostDisk.Type = "Directory" }, `spec.volumes[4].hostDisk.type: "Directory" is not Disk or DiskOrCreate`},
		{"hostDisk DiskOrCreate without capacity", func(v *v1.VirtualMachineInstance) { vol(v, "host").HostDisk.Capacity = resource.Quantity{} }, "spec.volumes[4].hostDisk.capacity: required and positive"},
		{"emptyDisk capacity zero", func(v *v1.VirtualMachineInstance) { vol(v, "scratch").EmptyDisk.Capacity = resource.MustParse("0") }, "spec.volumes[2].emptyDisk.capacity: must be positive"},
		{"emptyDisk capacity absurd", func(v *v1.VirtualMachineInstance) { vol(v, "scratch").EmptyDisk.Capacity = resource.MustParse("2Ei") }, "spec.volumes[2].emptyDisk.capacity: 2Ei is more than the 1Pi allowed"},
		{"cloud-init user data too large", func(v *v1.VirtualMachineInstance) {
			vol(v, "cloudinit").CloudInitNoCloud.UserData = strings.Repeat("x", MaxCloudInitBytes+1)
		}, "spec.volumes[1].cloudInitNoCloud.userData: user data is 262145 bytes, more than the 262144 allowed"},
		{"cloud-init bad base64", func(v *v1.VirtualMachineInstance) {
			c := vol(v, "cloudinit").CloudInitNoCloud
			c.UserData, c.UserDataBase64 = "", "!!!"
		}, "spec.volumes[1].cloudInitNoCloud.userDataBase64: invalid base64"},
		{"cloud-init two user data sources", func(v *v1.VirtualMachineInstance) {
			vol(v, "cloudinit").CloudInitNoCloud.UserDataBase64 = "eA=="
		}, "spec.volumes[1].cloudInitNoCloud: set only one of userData, userDataBase64 and secretRef"},
		{"cloud-init empty", func(v *v1.VirtualMachineInstance) { vol(v, "cloudinit").CloudInitNoCloud.UserData = "" }, "spec.volumes[1].cloudInitNoCloud: needs userData or networkData"},
		{"PVC without claim", func(v *v1.VirtualMachineInstance) { vol(v, "iso").PersistentVolumeClaim.ClaimName = "" }, "spec.volumes[3].persistentVolumeClaim.claimName: required"},
		{"interface without network", func(v *v1.VirtualMachineInstance) { v.Spec.Networks = v.Spec.Networks[:1] }, `spec.domain.devices.interfaces[1].name: "secondary" has no network of the same name in spec.networks`},
		{"network without interface", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = v.Spec.Domain.Devices.Interfaces[:1]
		}, `spec.networks[1].name: "secondary" has no interface of the same name`},
		{"duplicate interface name", func(v *v1.VirtualMachineInstance) { iface(v, 1).Name = "default" }, `spec.domain.devices.interfaces[1].name: "default" is used by another interface`},
		{"interface name with slash", func(v *v1.VirtualMachineInstance) {
			iface(v, 1).Name = "a/b"
			v.Spec.Networks[1].Name = "a/b"
		}, `spec.domain.devices.interfaces[1].name: "a/b" may contain only letters, digits, - and _`},
		{"interface without binding", func(v *v1.VirtualMachineInstance) { iface(v, 1).Bridge = nil }, "spec.domain.devices.interfaces[1]: no binding"},
		{"interface with two bindings", func(v *v1.VirtualMachineInstance) { iface(v, 0).Bridge = &v1.InterfaceBridge{} }, "spec.domain.devices.interfaces[0]: 2 bindings set (bridge, masquerade)"},
		{"masquerade on multus", func(v *v1.VirtualMachineInstance) {
			iface(v, 1).Bridge, iface(v, 1).Masquerade = nil, &v1.InterfaceMasquerade{}
		}, "spec.domain.devices.interfaces[1].masquerade: masquerade is only possible on the pod network"},
		{"sriov on the pod network", func(v *v1.VirtualMachineInstance) {
			iface(v, 0).Masquerade, iface(v, 0).SRIOV, iface(v, 0).Ports = nil, &v1.InterfaceSRIOV{}, nil
		}, "spec.domain.devices.interfaces[0].sriov: sriov needs a multus or resourceClaim network"},
		{"removed slirp binding", func(v *v1.VirtualMachineInstance) {
			iface(v, 0).Masquerade, iface(v, 0).DeprecatedSlirp = nil, &v1.DeprecatedInterfaceSlirp{}
		}, "spec.domain.devices.interfaces[0].slirp: this binding was removed"},
		{"port zero", func(v *v1.VirtualMachineInstance) { iface(v, 0).Ports[0].Port = 0 }, "spec.domain.devices.interfaces[0].ports[0].port: 0 is not in 1..65535"},
		{"port too large", func(v *v1.VirtualMachineInstance) { iface(v, 0).Ports[0].Port = 65536 }, "spec.domain.devices.interfaces[0].ports[0].port: 65536 is not in 1..65535"},
		{"port protocol", func(v *v1.VirtualMachineInstance) { iface(v, 0).Ports[0].Protocol = "SCTP" }, `spec.domain.devices.interfaces[0].ports[0].protocol: "SCTP" is not TCP or UDP`},
		{"port repeated", func(v *v1.VirtualMachineInstance) { iface(v, 0).Ports[2].Port = 22 }, "spec.domain.devices.interfaces[0].ports[2]: TCP port 22 is already listed at spec.domain.devices.interfaces[0].ports[0]"},
		{"mac malformed", func(v *v1.VirtualMachineInstance) { iface(v, 1).MacAddress = "02:00:00:aa:bb" }, `spec.domain.devices.interfaces[1].macAddress: "02:00:00:aa:bb" is not a MAC address`},
		{"dhcp ntp server not IPv4", func(v *v1.VirtualMachineInstance) {
			iface(v, 0).DHCPOptions = &v1.DHCPOptions{NTPServers: []string{"192.0.2.1", "ntp.example"}}
		}, `spec.domain.devices.interfaces[0].dhcpOptions.ntpServers[1]: "ntp.example" is not an IPv4 address`},
		{"dhcp private option out of range", func(v *v1.VirtualMachineInstance) {
			iface(v, 1).DHCPOptions = &v1.DHCPOptions{PrivateOptions: []v1.DHCPPrivateOptions{{Option: 66, Value: "x"}}}
		}, "spec.domain.devices.interfaces[1].dhcpOptions.privateOptions[0].option: 66 is not in the private range 224-254"},
		{"dhcp private option twice", func(v *v1.VirtualMachineInstance) {
			iface(v, 0).DHCPOptions = &v1.DHCPOptions{PrivateOptions: []v1.DHCPPrivateOptions{{Option: 240, Value: "a"}, {Option: 240, Value: "b"}}}
		}, "spec.domain.devices.interfaces[0].dhcpOptions.privateOptions[1].option: 240 is given twice"},
		{"mac reserved for masquerade", func(v *v1.VirtualMachineInstance) { iface(v, 0).MacAddress = "02:00:00:00:00:00" }, "spec.domain.devices.interfaces[0].macAddress: 02:00:00:00:00:00 is reserved"},
		{"interface pci address", func(v *v1.VirtualMachineInstance) { iface(v, 1).PciAddress = "0000:00:1f.9" }, `spec.domain.devices.interfaces[1].pciAddress: "0000:00:1f.9" is not a PCI address`},
		{"interface model", func(v *v1.VirtualMachineInstance) { iface(v, 1).Model = "vmxnet3" }, `spec.domain.devices.interfaces[1].model: "vmxnet3" is not one of`},
		{"two pod networks", func(v *v1.VirtualMachineInstance) {
			v.Spec.Networks[1].Multus, v.Spec.Networks[1].Pod = nil, &v1.PodNetwork{}
		}, "spec.networks: 2 pod networks; at most one allowed"},
		{"network without source", func(v *v1.VirtualMachineInstance) { v.Spec.Networks[1].Multus = nil }, "spec.networks[1]: no network source"},
		{"resource claim network beside a multus one", func(v *v1.VirtualMachineInstance) {
			v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: "vf", NetworkSource: v1.NetworkSource{ResourceClaim: &v1.ClaimRequest{ClaimName: "c", RequestName: "r"}}})
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: "vf", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}})
		}, `spec.networks[2]: Multus and resourceClaim networks cannot be mixed in one VMI`},
		{"resource claim network naming no claim", func(v *v1.VirtualMachineInstance) {
			v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: "vf", NetworkSource: v1.NetworkSource{ResourceClaim: &v1.ClaimRequest{ClaimName: "c", RequestName: "r"}}})
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: "vf", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}})
		}, `spec.networks[2].resourceClaim.claimName: "c" is not in spec.resourceClaims`},
		{"memory missing", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = nil }, "spec.domain.memory.guest: required"},
		{"memory zero", func(v *v1.VirtualMachineInstance) { q := resource.MustParse("0"); v.Spec.Domain.Memory.Guest = &q }, "spec.domain.memory.guest: must be positive"},
		{"memory absurd", func(v *v1.VirtualMachineInstance) {
			q := resource.MustParse("17Ti")
			v.Spec.Domain.Memory.Guest, v.Spec.Domain.Memory.MaxGuest = &q, nil
		}, "spec.domain.memory.guest: 17Ti is more than"},
		{"maxGuest below guest", func(v *v1.VirtualMachineInstance) {
			q := resource.MustParse("512Mi")
			v.Spec.Domain.Memory.MaxGuest = &q
		}, "spec.domain.memory.maxGuest: 512Mi is less than guest (1Gi)"},
		{"hugepage size", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "3Mi"} }, `spec.domain.memory.hugepages.pageSize: "3Mi" is not a power of two`},
		{"hugepage size unparsable", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "huge"} }, `spec.domain.memory.hugepages.pageSize: "huge" is not a size`},
		{"guest not a multiple of the hugepage size", func(v *v1.VirtualMachineInstance) {
			q := resource.MustParse("1100Mi")
			v.Spec.Domain.Memory.Guest, v.Spec.Domain.Memory.MaxGuest = &q, nil
			v.Spec.Domain.Memory.Hugepages = &v1.Hugepages{PageSize: "1Gi"}
		}, "spec.domain.memory.guest: 1100Mi is not a multiple of the hugepage size 1Gi"},
		{"too many vCPUs", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.Cores, v.Spec.Domain.CPU.Threads, v.Spec.Domain.CPU.MaxSockets = 2, 256, 2, 0
		}, "spec.domain.cpu: sockets×cores×threads is 1024 vCPUs, more than 512"},
		{"maxSockets below sockets", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Sockets = 8 }, "spec.domain.cpu.maxSockets: 4 is less than sockets (8)"},
		{"cpu request above 512", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("4096")}
		}, "spec.domain.resources.requests[cpu]: 4096 is more than 512 CPUs"},
		{"cpu limit so large that Quantity.Value wraps", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Limits = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("9e30")}
		}, "spec.domain.resources.limits[cpu]: 9e30 is more than 512 CPUs"},
		{"memory so large that Quantity.Value wraps", func(v *v1.VirtualMachineInstance) {
			q := resource.MustParse("9e30")
			v.Spec.Domain.Memory.Guest, v.Spec.Domain.Memory.MaxGuest = &q, nil
		}, "spec.domain.memory.guest: 9e30 is more than"},
		{"negative memory request", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("-1Gi")}
		}, "spec.domain.resources.requests[memory]: must not be negative"},
		{"secure boot without SMM", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Features.SMM = nil }, "spec.domain.firmware.bootloader.efi.secureBoot: secure boot requires spec.domain.features.smm to be enabled"},
		{"secure boot (implicit) with SMM off", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader.EFI.SecureBoot = nil
			v.Spec.Domain.Features.SMM.Enabled = new(bool)
		}, "spec.domain.firmware.bootloader.efi.secureBoot: secure boot requires"},
		{"bios and efi", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Firmware.Bootloader.BIOS = &v1.BIOS{} }, "spec.domain.firmware.bootloader: set either bios or efi"},
		{"firmware uuid", func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Firmware.UUID = "not-a-uuid" }, `spec.domain.firmware.uuid: "not-a-uuid" is not a UUID`},
		{"kernel boot relative path", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k", KernelPath: "boot/vmlinuz"}}
		}, `spec.domain.firmware.kernelBoot.container.kernelPath: "boot/vmlinuz" must be an absolute path`},
		{"spinlocks too few", func(v *v1.VirtualMachineInstance) {
			r := uint32(100)
			v.Spec.Domain.Features.Hyperv = &v1.FeatureHyperv{Spinlocks: &v1.FeatureSpinlocks{Retries: &r}}
		}, "spec.domain.features.hyperv.spinlocks.spinlocks: 100 is less than 4096"},
		{"input type", func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "m", Type: "mouse", Bus: "usb"}}
		}, `spec.domain.devices.inputs[0].type: "mouse" is not tablet or keyboard`},
		{"negative grace period", func(v *v1.VirtualMachineInstance) { g := int64(-1); v.Spec.TerminationGracePeriodSeconds = &g }, "spec.terminationGracePeriodSeconds: must not be negative"},
		{"clock utc and timezone", func(v *v1.VirtualMachineInstance) {
			tz := v1.ClockOffsetTimezone("Europe/Paris")
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{}, Timezone: &tz}}
		}, "spec.domain.clock: set either utc or timezone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vmi := loadBase(t)
			tc.mutate(vmi)
			err := Validate(vmi)
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tc.want)
			}
			for _, fe := range FieldErrors(err) {
				if fe.Path == "" {
					t.Errorf("error without a field path: %v", fe)
				}
			}
		})
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	vmi := loadBase(t)
	vmi.Name = ""
	vmi.Spec.Volumes[0].ContainerDisk.Image = ""
	fes := FieldErrors(Validate(vmi))
	if len(fes) != 2 || fes[0].Path != "metadata.name" || fes[1].Path != "spec.volumes[0].containerDisk.image" {
		t.Fatalf("got %v", fes)
	}
}

func TestValidateUndefaulted(t *testing.T) {
	// Validate on a VMI nobody defaulted must report, not crash.
	vmi, err := Parse([]byte("metadata: {name: x}\nspec: {domain: {devices: {}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(vmi)
	if err == nil || !strings.Contains(err.Error(), "spec.domain.memory.guest: required") {
		t.Fatalf("Validate = %v", err)
	}
	if err := Validate(nil); err == nil {
		t.Fatal("Validate(nil) passed")
	}
}

func TestLoadOptions(t *testing.T) {
	if _, err := Load([]byte(validBase), Options{DefaultBinding: "slirp"}); err == nil || !strings.Contains(err.Error(), `default binding "slirp"`) {
		t.Errorf("bad binding: %v", err)
	}
	if _, err := Load([]byte(validBase), Options{Arch: "riscv64"}); err == nil || !strings.Contains(err.Error(), `architecture "riscv64"`) {
		t.Errorf("bad arch: %v", err)
	}
	if _, err := LoadFile("/nonexistent/vmi.yaml", Options{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/vmi.yaml") {
		t.Errorf("missing file: %v", err)
	}
}
