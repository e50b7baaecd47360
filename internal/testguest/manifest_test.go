package testguest

import (
	"slices"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// TestManifest: vlctl testguest's shape (pod network with a declared
// port, scratch disk, user data, grace period) and the bare one (no
// interface, root disk alone; or KubeVirt's default interface) load
// through the real VMI loader as written.
func TestManifest(t *testing.T) {
	full := Manifest{Name: "tg", Namespace: "default", Grace: 10, Kernel: "/k", Cmdline: "console=ttyS0 vl.x=1",
		Root: "/r.img", Scratch: true, UserData: "#!/bin/sh\necho hi\n", Pod: &Interface{Ports: []int{80}}}
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
	bare := Manifest{Name: "b", Kernel: "/k", Root: "/r.img", EFI: Persistent, TPM: On}
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
