package vmi

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
)

// base is a small VMI with nothing defaulted; tests add their bit of YAML
// under spec.domain or spec.
func parseSpec(t *testing.T, domainExtra, specExtra string) *v1.VirtualMachineInstance {
	t.Helper()
	doc := "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: vmi-fedora\nspec:\n  domain:\n    devices: {}\n" +
		indent(domainExtra, "    ") + indent(specExtra, "  ")
	vmi, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", doc, err)
	}
	return vmi
}

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestSetDefaults(t *testing.T) {
	tests := []struct {
		name       string
		domain     string // YAML under spec.domain (devices: {} is already there)
		spec       string // YAML under spec
		opts       Options
		check      func(t *testing.T, vmi *v1.VirtualMachineInstance)
		skipDomain bool
	}{
		{
			name: "machine type amd64 q35",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "machine", vmi.Spec.Domain.Machine.Type, "q35")
				eq(t, "architecture", vmi.Spec.Architecture, "amd64")
			},
		},
		{
			name: "machine type arm64 virt, s390x s390-ccw-virtio",
			opts: Options{Arch: "arm64"},
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "machine", vmi.Spec.Domain.Machine.Type, "virt")
				s := parseSpec(t, "", "")
				SetDefaults(s, Options{Arch: "s390x"})
				eq(t, "s390x machine", s.Spec.Domain.Machine.Type, "s390-ccw-virtio")
			},
		},
		{
			name:   "user machine type kept",
			domain: "machine: {type: pc-q35-rhel9.6.0}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "machine", vmi.Spec.Domain.Machine.Type, "pc-q35-rhel9.6.0")
			},
		},
		{
			name:   "cpu limit becomes the request; sockets rounded up",
			domain: "resources: {limits: {cpu: 1500m}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				q := vmi.Spec.Domain.Resources.Requests[k8sv1.ResourceCPU]
				eq(t, "requests.cpu", q.String(), "1500m")
				eq(t, "sockets", vmi.Spec.Domain.CPU.Sockets, uint32(2))
				eq(t, "cores", vmi.Spec.Domain.CPU.Cores, uint32(1))
				eq(t, "threads", vmi.Spec.Domain.CPU.Threads, uint32(1))
			},
		},
		{
			name:   "sockets from requests.cpu",
			domain: "resources: {requests: {cpu: \"3\"}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "sockets", vmi.Spec.Domain.CPU.Sockets, uint32(3))
			},
		},
		{
			name: "one socket when nothing is said",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				c := vmi.Spec.Domain.CPU
				eq(t, "topology", [3]uint32{c.Sockets, c.Cores, c.Threads}, [3]uint32{1, 1, 1})
			},
		},
		{
			name:   "a user topology is left alone (others stay 0)",
			domain: "cpu: {cores: 2}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				c := vmi.Spec.Domain.CPU
				eq(t, "topology", [3]uint32{c.Sockets, c.Cores, c.Threads}, [3]uint32{0, 2, 0})
				eq(t, "maxSockets (no hotplug without sockets)", c.MaxSockets, uint32(0))
			},
		},
		{
			name:   "guest memory from requests",
			domain: "resources: {requests: {memory: 512Mi}, limits: {memory: 1Gi}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "guest", vmi.Spec.Domain.Memory.Guest.String(), "512Mi")
			},
		},
		{
			name:   "guest memory from limits",
			domain: "resources: {limits: {memory: 1Gi}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "guest", vmi.Spec.Domain.Memory.Guest.String(), "1Gi")
			},
		},
		{
			name:   "guest memory from the hugepage size",
			domain: "memory: {hugepages: {pageSize: 2Mi}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "guest", vmi.Spec.Domain.Memory.Guest.String(), "2Mi")
			},
		},
		{
			name:   "user guest memory kept",
			domain: "memory: {guest: 1024M}\nresources: {requests: {memory: 2Gi}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "guest", vmi.Spec.Domain.Memory.Guest.String(), "1024M")
			},
		},
		{
			name: "cpu model host-model; arm64 host-passthrough",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "model", vmi.Spec.Domain.CPU.Model, "host-model")
				a := parseSpec(t, "", "")
				SetDefaults(a, Options{Arch: "arm64"})
				eq(t, "arm64 model", a.Spec.Domain.CPU.Model, "host-passthrough")
			},
		},
		{
			name:   "user cpu model kept",
			domain: "cpu: {model: Haswell}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "model", vmi.Spec.Domain.CPU.Model, "Haswell")
			},
		},
		{
			name: "containerDisk pull policies",
			spec: `volumes:
- {name: a, containerDisk: {image: "reg/img:latest"}}
- {name: b, containerDisk: {image: "reg/img"}}
- {name: c, containerDisk: {image: "reg/img:devel"}}
- {name: d, containerDisk: {image: "reg/img@sha256:0123"}}
- {name: e, containerDisk: {image: "reg/img:latest", imagePullPolicy: Never}}
- {name: f, containerDisk: {image: "127.0.0.1:5000/img"}}
- {name: g, containerDisk: {image: "127.0.0.1:5000/img:v1"}}`,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				var got []k8sv1.PullPolicy
				for _, v := range vmi.Spec.Volumes {
					got = append(got, v.ContainerDisk.ImagePullPolicy)
				}
				eq(t, "policies", got, []k8sv1.PullPolicy{k8sv1.PullAlways, k8sv1.PullAlways, k8sv1.PullIfNotPresent, k8sv1.PullIfNotPresent, k8sv1.PullNever,
					k8sv1.PullAlways, k8sv1.PullIfNotPresent}) // a registry's port is no tag
			},
		},
		{
			name: "default pod network with masquerade",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				ifs, nets := vmi.Spec.Domain.Devices.Interfaces, vmi.Spec.Networks
				if len(ifs) != 1 || ifs[0].Name != "default" || ifs[0].Masquerade == nil || ifs[0].Bridge != nil {
					t.Errorf("interfaces %+v", ifs)
				}
				if len(nets) != 1 || nets[0].Name != "default" || nets[0].Pod == nil {
					t.Errorf("networks %+v", nets)
				}
			},
		},
		{
			name: "default pod network with bridge (cluster default)",
			opts: Options{DefaultBinding: "bridge"},
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				ifs := vmi.Spec.Domain.Devices.Interfaces
				if len(ifs) != 1 || ifs[0].Bridge == nil || ifs[0].Masquerade != nil {
					t.Errorf("interfaces %+v", ifs)
				}
			},
		},
		{
			name:   "no default network when autoattachPodInterface is false",
			domain: "devices: {autoattachPodInterface: false}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "interfaces", len(vmi.Spec.Domain.Devices.Interfaces), 0)
				eq(t, "networks", len(vmi.Spec.Networks), 0)
			},
			skipDomain: true,
		},
		{
			name: "no default interface when networks are given",
			spec: "networks: [{name: n1, multus: {networkName: x}}]",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "interfaces", len(vmi.Spec.Domain.Devices.Interfaces), 0)
				eq(t, "networks", len(vmi.Spec.Networks), 1)
			},
		},
		{
			name: "a disk for every volume without disk or filesystem; disk: {} and sata bus",
			domain: `devices:
  filesystems: [{name: fsvol, virtiofs: {}}]
  disks: [{name: explicit, cdrom: {}}]`,
			spec: `volumes:
- {name: explicit, containerDisk: {image: a:b}}
- {name: implicit, emptyDisk: {capacity: 1Gi}}
- {name: fsvol, configMap: {name: cm}}`,
			skipDomain: true,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				d := vmi.Spec.Domain.Devices.Disks
				if len(d) != 2 || d[1].Name != "implicit" || d[1].Disk == nil || d[1].Disk.Bus != v1.DiskBusSATA {
					t.Fatalf("disks %+v", d)
				}
				if d[0].CDRom == nil || d[0].CDRom.ReadOnly == nil || !*d[0].CDRom.ReadOnly ||
					d[0].CDRom.Tray != v1.TrayStateClosed || d[0].CDRom.Bus != v1.DiskBusSATA {
					t.Errorf("cdrom %+v", d[0].CDRom)
				}
			},
		},
		{
			name:       "disk buses virtio on arm64, user bus kept",
			opts:       Options{Arch: "arm64"},
			domain:     "devices: {disks: [{name: a}, {name: b, disk: {bus: scsi}}, {name: c, lun: {}}]}",
			skipDomain: true,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				d := vmi.Spec.Domain.Devices.Disks
				eq(t, "buses", []v1.DiskBus{d[0].Disk.Bus, d[1].Disk.Bus, d[2].LUN.Bus}, []v1.DiskBus{"virtio", "scsi", "virtio"})
			},
		},
		{
			name:       "inputs usb tablet",
			domain:     "devices: {inputs: [{name: in0}, {name: in1, type: keyboard, bus: virtio}]}",
			skipDomain: true,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				in := vmi.Spec.Domain.Devices.Inputs
				eq(t, "in0", [2]string{string(in[0].Bus), string(in[0].Type)}, [2]string{"usb", "tablet"})
				eq(t, "in1", [2]string{string(in[1].Bus), string(in[1].Type)}, [2]string{"virtio", "keyboard"})
			},
		},
		{
			name:       "autoattachInputDevice adds one input",
			domain:     "devices: {autoattachInputDevice: true}",
			skipDomain: true,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				in := vmi.Spec.Domain.Devices.Inputs
				if len(in) != 1 || in[0].Name != "default-0" || in[0].Type != "tablet" || in[0].Bus != "usb" {
					t.Errorf("inputs %+v", in)
				}
			},
		},
		{
			name:   "features: acpi on, present features enabled, spinlocks 4096",
			domain: "features: {smm: {}, apic: {}, hyperv: {relaxed: {}, spinlocks: {}, vapic: {enabled: false}}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				f := vmi.Spec.Domain.Features
				eq(t, "acpi", *f.ACPI.Enabled, true)
				eq(t, "smm", *f.SMM.Enabled, true)
				eq(t, "apic", *f.APIC.Enabled, true)
				eq(t, "relaxed", *f.Hyperv.Relaxed.Enabled, true)
				eq(t, "vapic stays off", *f.Hyperv.VAPIC.Enabled, false)
				eq(t, "spinlocks retries", *f.Hyperv.Spinlocks.Retries, uint32(4096))
			},
		},
		{
			name: "features non-nil even when absent; s390x acpi off",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Spec.Domain.Features == nil || vmi.Spec.Domain.Firmware == nil {
					t.Fatal("features/firmware nil")
				}
				s := parseSpec(t, "", "")
				SetDefaults(s, Options{Arch: "s390x"})
				eq(t, "s390x acpi", *s.Spec.Domain.Features.ACPI.Enabled, false)
			},
		},
		{
			name:   "hyperv dependencies: synictimer pulls synic and vpindex; evmcs pulls vapic and vmx",
			domain: "features: {hyperv: {synictimer: {}, evmcs: {}}}\ncpu: {features: [{name: vmx, policy: optional}]}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				h := vmi.Spec.Domain.Features.Hyperv
				if h.SyNIC == nil || !*h.SyNIC.Enabled || h.VPIndex == nil || !*h.VPIndex.Enabled || h.VAPIC == nil || !*h.VAPIC.Enabled {
					t.Errorf("hyperv %+v", h)
				}
				f := vmi.Spec.Domain.CPU.Features
				if len(f) != 1 || f[0].Name != "vmx" || f[0].Policy != "require" {
					t.Errorf("cpu features %+v", f)
				}
			},
		},
		{
			name:   "hyperv dependency explicitly disabled is left for Validate",
			domain: "features: {hyperv: {synic: {}, vpindex: {enabled: false}}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "vpindex", *vmi.Spec.Domain.Features.Hyperv.VPIndex.Enabled, false)
				if err := Validate(vmi); err == nil || !strings.Contains(err.Error(), "spec.domain.features.hyperv.synic: requires") {
					t.Errorf("Validate = %v", err)
				}
			},
		},
		{
			name:   "timers enabled",
			domain: "clock: {utc: {}, timer: {hpet: {present: false}, rtc: {}, pit: {}, kvm: {}, hyperv: {}}}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				tm := vmi.Spec.Domain.Clock.Timer
				eq(t, "timers", []bool{*tm.HPET.Enabled, *tm.RTC.Enabled, *tm.PIT.Enabled, *tm.KVM.Enabled, *tm.Hyperv.Enabled}, []bool{false, true, true, true, true})
			},
		},
		{
			name:       "watchdog i6300esb reset",
			domain:     "devices: {watchdog: {name: wd}}",
			skipDomain: true,
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				w := vmi.Spec.Domain.Devices.Watchdog
				if w.I6300ESB == nil || w.I6300ESB.Action != v1.WatchdogActionReset {
					t.Errorf("watchdog %+v", w)
				}
			},
		},
		{
			name: "arm64 EFI without secure boot",
			opts: Options{Arch: "arm64"},
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				bl := vmi.Spec.Domain.Firmware.Bootloader
				if bl == nil || bl.EFI == nil || bl.EFI.SecureBoot == nil || *bl.EFI.SecureBoot {
					t.Errorf("bootloader %+v", bl)
				}
			},
		},
		{
			name: "stable firmware UUID from the name",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "uuid", string(vmi.Spec.Domain.Firmware.UUID), "12505594-71e6-5333-990c-4f9aa32f9b14")
			},
		},
		{
			name:   "user firmware UUID kept",
			domain: "firmware: {uuid: 5d307ca9-b3ef-428c-8861-06e72d69f223}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "uuid", string(vmi.Spec.Domain.Firmware.UUID), "5d307ca9-b3ef-428c-8861-06e72d69f223")
			},
		},
		{
			name: "CPU hotplug maxima: 1 socket gives 4",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "maxSockets", vmi.Spec.Domain.CPU.MaxSockets, uint32(4))
			},
		},
		{
			name:   "CPU hotplug maxima capped at 512 vCPUs",
			domain: "cpu: {sockets: 200, cores: 2, threads: 1}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "maxSockets", vmi.Spec.Domain.CPU.MaxSockets, uint32(256))
			},
		},
		{
			name:   "no CPU or memory hotplug on arm64",
			opts:   Options{Arch: "arm64"},
			domain: "memory: {guest: 1Gi}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "maxSockets", vmi.Spec.Domain.CPU.MaxSockets, uint32(0))
				if vmi.Spec.Domain.Memory.MaxGuest != nil {
					t.Errorf("maxGuest %v", vmi.Spec.Domain.Memory.MaxGuest)
				}
			},
		},
		{
			name:   "memory hotplug maximum: 1Gi gives 4Gi",
			domain: "memory: {guest: 1Gi}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "maxGuest", vmi.Spec.Domain.Memory.MaxGuest.Value(), int64(4<<30))
			},
		},
		{
			name:   "no memory hotplug for 1024M (unaligned) or below 1Gi",
			domain: "memory: {guest: 1024M}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Spec.Domain.Memory.MaxGuest != nil {
					t.Errorf("maxGuest %v", vmi.Spec.Domain.Memory.MaxGuest)
				}
				s := parseSpec(t, "memory: {guest: 512Mi}", "")
				SetDefaults(s, Options{})
				if s.Spec.Domain.Memory.MaxGuest != nil {
					t.Errorf("512Mi maxGuest %v", s.Spec.Domain.Memory.MaxGuest)
				}
			},
		},
		{
			name:   "no memory hotplug with realtime or launchSecurity",
			domain: "memory: {guest: 2Gi}\nlaunchSecurity: {}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if vmi.Spec.Domain.Memory.MaxGuest != nil {
					t.Errorf("maxGuest %v", vmi.Spec.Domain.Memory.MaxGuest)
				}
			},
		},
		{
			name:   "status memory and current CPU topology",
			domain: "memory: {guest: 1Gi}\ncpu: {sockets: 2, cores: 2, threads: 1}",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				m := vmi.Status.Memory
				if m == nil || m.GuestAtBoot.String() != "1Gi" || m.GuestCurrent.String() != "1Gi" || m.GuestRequested.String() != "1Gi" {
					t.Errorf("status.memory %+v", m)
				}
				eq(t, "topology", *vmi.Status.CurrentCPUTopology, v1.CPUTopology{Sockets: 2, Cores: 2, Threads: 1})
			},
		},
		{
			name: "pci topology annotation, runtime user, identity",
			opts: Options{Namespace: "lab"},
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "annotation", vmi.Annotations[PCITopologyAnnotation], "v3")
				eq(t, "runtimeUser", vmi.Status.RuntimeUser, uint64(107))
				eq(t, "namespace", vmi.Namespace, "lab")
				eq(t, "uid", vmi.UID, StableUID("lab", "vmi-fedora"))
				if vmi.Spec.TerminationGracePeriodSeconds != nil {
					t.Errorf("grace period defaulted to %d", *vmi.Spec.TerminationGracePeriodSeconds)
				}
				eq(t, "GracePeriodSeconds", GracePeriodSeconds(vmi), int64(30))
			},
		},
		{
			name: "no pci topology annotation on s390x; namespace default",
			opts: Options{Arch: "s390x"},
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				if _, ok := vmi.Annotations[PCITopologyAnnotation]; ok {
					t.Errorf("annotations %v", vmi.Annotations)
				}
				eq(t, "namespace", vmi.Namespace, "default")
			},
		},
		{
			name: "grace period 0 is kept",
			spec: "terminationGracePeriodSeconds: 0",
			check: func(t *testing.T, vmi *v1.VirtualMachineInstance) {
				eq(t, "GracePeriodSeconds", GracePeriodSeconds(vmi), int64(0))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var vmi *v1.VirtualMachineInstance
			if tc.skipDomain {
				// tc.domain replaces the default "devices: {}"
				doc := "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: vmi-fedora\nspec:\n  domain:\n" +
					indent(tc.domain, "    ") + indent(tc.spec, "  ")
				var err error
				if vmi, err = Parse([]byte(doc)); err != nil {
					t.Fatalf("parse:\n%s\n%v", doc, err)
				}
			} else {
				vmi = parseSpec(t, tc.domain, tc.spec)
			}
			SetDefaults(vmi, tc.opts)
			tc.check(t, vmi)

			// Idempotent: a second run changes nothing.
			again := vmi.DeepCopy()
			SetDefaults(again, tc.opts)
			if !equality.Semantic.DeepEqual(vmi, again) {
				t.Errorf("SetDefaults is not idempotent")
			}
		})
	}
}

func TestFirmwareUUIDKnownValue(t *testing.T) {
	// The value KubeVirt's VM controller gives examples/vmi-fedora.yaml.
	eq(t, "uuid", string(FirmwareUUID("vmi-fedora")), "12505594-71e6-5333-990c-4f9aa32f9b14")
	if FirmwareUUID("a") == FirmwareUUID("b") {
		t.Error("different names, same UUID")
	}
	if StableUID("ns1", "a") == StableUID("ns2", "a") {
		t.Error("different namespaces, same UID")
	}
}

func TestSetDefaultsNil(t *testing.T) {
	SetDefaults(nil, Options{}) // must not panic
	eq(t, "grace of nil", GracePeriodSeconds(nil), int64(30))
}

func TestSetDefaultsQuantityPrecision(t *testing.T) {
	// The status quantities are copies: changing the spec later must not
	// change the recorded boot size.
	vmi := parseSpec(t, "memory: {guest: 1Gi}", "")
	SetDefaults(vmi, Options{})
	*vmi.Spec.Domain.Memory.Guest = resource.MustParse("2Gi")
	eq(t, "guestAtBoot", vmi.Status.Memory.GuestAtBoot.String(), "1Gi")
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestGracePeriodSeconds(t *testing.T) {
	ptr := func(v int64) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{TerminationGracePeriodSeconds: &v}}
	}
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		want int64
	}{
		{"no VMI", nil, DefaultGracePeriodSeconds},
		{"unset", &v1.VirtualMachineInstance{}, DefaultGracePeriodSeconds},
		{"zero", ptr(0), 0},
		{"set", ptr(180), 180},
		{"2^62: capped, not wrapped", ptr(1 << 62), MaxGracePeriodSeconds},
		{"largest int64", ptr(math.MaxInt64), MaxGracePeriodSeconds},
		{"negative (Validate refuses it)", ptr(-5), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GracePeriodSeconds(tc.vmi)
			if got != tc.want {
				t.Errorf("GracePeriodSeconds = %d, want %d", got, tc.want)
			}
			// What the callers do with it must not overflow.
			if d := time.Duration(got) * time.Second; d < 0 || got > 0 && d/time.Second != time.Duration(got) {
				t.Errorf("%d s overflows a time.Duration", got)
			}
		})
	}
}
