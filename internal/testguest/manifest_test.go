package testguest

import (
	"reflect"
	"slices"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// TestManifest: vlctl testguest's shape (pod network with a declared
// port, scratch disk, user data, grace period) and the bare one (no
// interface, root disk alone; or KubeVirt's default interface) load
// through the real VMI loader as written.
func TestManifest(t *testing.T) {
	full := Manifest{
		Meta:    Meta{Name: "tg", Namespace: "default"},
		Boot:    Boot{Kernel: "/k", Cmdline: "console=ttyS0 vl.x=1"},
		Disks:   Disks{Root: "/r.img", Scratch: true, UserData: "#!/bin/sh\necho hi\n"},
		Network: Network{Pod: &Interface{Ports: []int{80}}},
		Grace:   10,
	}
	v, err := vmi.Load([]byte(full.YAML()), vmi.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, full.YAML())
	}
	var disks []string
	for _, d := range v.Spec.Domain.Devices.Disks {
		disks = append(disks, d.Name)
	}
	kb := v.Spec.Domain.Firmware.KernelBoot
	ifs := v.Spec.Domain.Devices.Interfaces
	switch {
	case !slices.Equal(disks, []string{"rootdisk", "scratch", "cloudinit"}):
		t.Errorf("disks %v", disks)
	case *v.Spec.TerminationGracePeriodSeconds != 10 || kb.KernelArgs != full.Cmdline || kb.Container.Image != "/k" || kb.Container.KernelPath != "/vmlinuz":
		t.Errorf("grace %d, kernelBoot %+v", *v.Spec.TerminationGracePeriodSeconds, kb)
	case len(ifs) != 1 || ifs[0].Masquerade == nil || len(ifs[0].Ports) != 1 || ifs[0].Ports[0].Port != 80:
		t.Errorf("interfaces %+v", ifs)
	case v.Spec.Volumes[2].CloudInitNoCloud == nil || v.Spec.Volumes[2].CloudInitNoCloud.UserData != full.UserData:
		t.Errorf("cloud-init volume %+v", v.Spec.Volumes[2])
	}
	bare := Manifest{
		Meta:  Meta{Name: "b"},
		Boot:  Boot{Kernel: "/k", EFI: Persistent, TPM: On},
		Disks: Disks{Root: "/r.img"},
	}
	v, err = vmi.Load([]byte(bare.YAML()), vmi.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, bare.YAML())
	}
	if a := v.Spec.Domain.Devices.AutoattachPodInterface; a == nil || *a || len(v.Spec.Volumes) != 1 ||
		v.Spec.Domain.Firmware.Bootloader.EFI == nil || !*v.Spec.Domain.Firmware.Bootloader.EFI.Persistent || v.Spec.Domain.Devices.TPM == nil {
		t.Errorf("bare manifest: autoattach %v, volumes %d, firmware %+v, tpm %+v", a, len(v.Spec.Volumes), v.Spec.Domain.Firmware.Bootloader, v.Spec.Domain.Devices.TPM)
	}
	bare.AutoattachPod = true
	if v, err = vmi.Load([]byte(bare.YAML()), vmi.Options{}); err != nil || v.Spec.Domain.Devices.AutoattachPodInterface != nil {
		t.Errorf("AutoattachPod: %v, autoattachPodInterface %v", err, v.Spec.Domain.Devices.AutoattachPodInterface)
	}
}

// TestManifestOptions: each option, rendered and parsed (strictly, as
// vlctl run parses), is where KubeVirt reads it; a manifest as a
// VirtualMachine has the VMI's spec as its template's.
func TestManifestOptions(t *testing.T) {
	base := Manifest{
		Meta:    Meta{Name: "o"},
		Boot:    Boot{Kernel: "/k"},
		Disks:   Disks{Root: "/r.img", UserData: "#!/bin/sh\n"},
		Network: Network{Pod: &Interface{}},
	}
	for _, tc := range []struct {
		name  string
		set   func(m *Manifest)
		check func(v *v1.VirtualMachineInstance) bool
	}{
		{"labels and annotations", func(m *Manifest) {
			m.Labels, m.Annotations = map[string]string{"app": "o", "b": "2"}, map[string]string{"x.io/hooks": `[{"args": ["--v"], "image": "r:1"}]`}
		}, func(v *v1.VirtualMachineInstance) bool {
			return reflect.DeepEqual(v.Labels, map[string]string{"app": "o", "b": "2"}) && v.Annotations["x.io/hooks"] == `[{"args": ["--v"], "image": "r:1"}]` && len(v.Annotations) == 1
		}},
		{"node selector", func(m *Manifest) { m.NodeSelector = map[string]string{"kubernetes.io/hostname": "n2"} },
			func(v *v1.VirtualMachineInstance) bool {
				return reflect.DeepEqual(v.Spec.NodeSelector, map[string]string{"kubernetes.io/hostname": "n2"})
			}},
		{"guest memory", func(m *Manifest) { m.Memory, m.GuestMemory = "64Mi", true }, func(v *v1.VirtualMachineInstance) bool {
			return v.Spec.Domain.Memory != nil && v.Spec.Domain.Memory.Guest.String() == "64Mi" && v.Spec.Domain.Resources.Requests == nil
		}},
		{"dedicated cores, memory limit", func(m *Manifest) { m.DedicatedCores, m.MemoryLimit = 2, "256Mi" }, func(v *v1.VirtualMachineInstance) bool {
			c, r := v.Spec.Domain.CPU, v.Spec.Domain.Resources
			return c != nil && c.Cores == 2 && c.DedicatedCPUPlacement && r.Limits.Memory().String() == "256Mi" && r.Requests.Memory().String() == "256Mi"
		}},
		{"root claim", func(m *Manifest) { m.RootClaim = "pvc-root" }, func(v *v1.VirtualMachineInstance) bool {
			s := v.Spec.Volumes[0].VolumeSource
			return s.ContainerDisk == nil && s.PersistentVolumeClaim != nil && s.PersistentVolumeClaim.ClaimName == "pvc-root"
		}},
		{"user data on a CD-ROM", func(m *Manifest) { m.UserDataCDROM = true }, func(v *v1.VirtualMachineInstance) bool {
			d := v.Spec.Domain.Devices.Disks[1]
			return d.Name == "cloudinit" && d.Disk == nil && d.CDRom != nil && d.CDRom.Bus == v1.DiskBusSATA
		}},
		{"virtiofs shares", func(m *Manifest) { m.Shares = []Share{{"app", "app-config"}, {"two", "cm2"}} }, func(v *v1.VirtualMachineInstance) bool {
			fs, vols := v.Spec.Domain.Devices.Filesystems, v.Spec.Volumes
			return len(fs) == 2 && fs[0].Name == "app" && fs[0].Virtiofs != nil && fs[1].Name == "two" && len(vols) == 4 &&
				vols[2].Name == "app" && vols[2].ConfigMap != nil && vols[2].ConfigMap.Name == "app-config" && vols[3].ConfigMap.Name == "cm2"
		}},
		{"GPUs", func(m *Manifest) { m.GPUs = []GPU{{"g", "nvidia.com/P40"}} }, func(v *v1.VirtualMachineInstance) bool {
			g := v.Spec.Domain.Devices.GPUs
			return len(g) == 1 && g[0].Name == "g" && g[0].DeviceName == "nvidia.com/P40"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			tc.set(&m)
			v, err := vmi.Parse([]byte(m.YAML()))
			if err != nil {
				t.Fatalf("%v\n%s", err, m.YAML())
			}
			// The same manifest as a VirtualMachine (compared before the
			// checks, whose reading of a quantity caches its text).
			vm, err := vmi.ParseVM([]byte(m.VMYAML("Always")))
			if err != nil {
				t.Fatalf("%v\n%s", err, m.VMYAML("Always"))
			}
			tmpl := vm.Spec.Template
			if vm.Name != "o" || vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != v1.RunStrategyAlways ||
				!reflect.DeepEqual(tmpl.Spec, v.Spec) || !reflect.DeepEqual(tmpl.ObjectMeta.Labels, v.Labels) || !reflect.DeepEqual(tmpl.ObjectMeta.Annotations, v.Annotations) {
				t.Errorf("as a VirtualMachine:\n%s", m.VMYAML("Always"))
			}
			if !tc.check(v) {
				t.Errorf("not where KubeVirt reads it:\n%s", m.YAML())
			}
		})
	}
}
