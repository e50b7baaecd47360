package launchertest

import (
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// TestVMIYAML: the test VMI loads through the real VMI loader, with and
// without the pod network, and carries what the spec asked for.
func TestVMIYAML(t *testing.T) {
	for _, net := range []bool{false, true} {
		s := VMISpec{Name: "tv", Namespace: "ns1", UID: "0b7c1f3e-8c39-4d8b-a1f0-3f2e9d1c4b5a", Token: "tok-1",
			PodNetwork: net, ExtraUserData: []string{"echo extra-line"}, KernelArgs: []string{testguest.OptPowerOff}}
		y := VMIYAML(s)
		v, err := vmi.Load([]byte(y), vmi.Options{})
		if err != nil {
			t.Fatalf("network %v: load: %v\n%s", net, err, y)
		}
		if v.Name != s.Name || v.Namespace != s.Namespace || string(v.UID) != s.UID {
			t.Errorf("network %v: metadata %s/%s %s", net, v.Namespace, v.Name, v.UID)
		}
		if got := len(v.Spec.Domain.Devices.Interfaces); (got == 1) != net || len(v.Spec.Networks) != got {
			t.Errorf("network %v: %d interfaces, %d networks", net, got, len(v.Spec.Networks))
		}
		args := v.Spec.Domain.Firmware.KernelBoot.KernelArgs
		if !strings.Contains(args, testguest.OptNoDHCP) || !strings.HasSuffix(args, testguest.OptPowerOff) {
			t.Errorf("network %v: kernel args %q", net, args)
		}
		var ud string
		for _, vol := range v.Spec.Volumes {
			if vol.CloudInitNoCloud != nil {
				ud = vol.CloudInitNoCloud.UserData
			}
		}
		if !strings.Contains(ud, `echo "token tok-1"`+"\n") || !strings.HasSuffix(ud, "echo extra-line\n") {
			t.Errorf("network %v: user data %q", net, ud)
		}
	}
}

// TestVMIYAMLPaths: the image-volume variants' paths reach the VMI.
func TestVMIYAMLPaths(t *testing.T) {
	s := VMISpec{Name: "tv", Namespace: "ns1", UID: "0b7c1f3e-8c39-4d8b-a1f0-3f2e9d1c4b5a", Token: "t",
		DiskPath: "/srv/guest.qcow2", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}
	v, err := vmi.Load([]byte(VMIYAML(s)), vmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := v.Spec.Domain.Firmware.KernelBoot.Container
	if v.Spec.Volumes[0].ContainerDisk.Path != s.DiskPath || c.KernelPath != s.KernelPath || c.InitrdPath != s.InitrdPath {
		t.Errorf("paths %q %q %q", v.Spec.Volumes[0].ContainerDisk.Path, c.KernelPath, c.InitrdPath)
	}
	v, err = vmi.Load([]byte(VMIYAML(VMISpec{Name: "tv", Namespace: "ns1", UID: s.UID})), vmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := v.Spec.Domain.Firmware.KernelBoot.Container; v.Spec.Volumes[0].ContainerDisk.Path != "" || c.KernelPath != "/vmlinuz" || c.InitrdPath != "/initrd.img" {
		t.Errorf("default paths %q %q %q", v.Spec.Volumes[0].ContainerDisk.Path, c.KernelPath, c.InitrdPath)
	}
}

// TestVMIYAMLFirmware: EFI and TPM choices reach the VMI, the EFI one with
// the EFI-stub kernel.
func TestVMIYAMLFirmware(t *testing.T) {
	for _, c := range []struct {
		s               VMISpec
		kernel          string
		efi, efiPersist bool
		tpm, tpmPersist bool
	}{
		{s: VMISpec{}, kernel: "/vmlinuz"},
		{s: VMISpec{EFI: true, TPM: true}, kernel: "/vmlinuz.efi", efi: true, tpm: true},
		{s: VMISpec{PersistentEFI: true, PersistentTPM: true}, kernel: "/vmlinuz.efi", efi: true, efiPersist: true, tpm: true, tpmPersist: true},
	} {
		c.s.Name, c.s.Namespace, c.s.UID = "tv", "ns1", "0b7c1f3e-8c39-4d8b-a1f0-3f2e9d1c4b5a"
		y := VMIYAML(c.s)
		v, err := vmi.Load([]byte(y), vmi.Options{})
		if err != nil {
			t.Fatalf("%+v: load: %v\n%s", c.s, err, y)
		}
		fw := v.Spec.Domain.Firmware
		if got := fw.KernelBoot.Container.KernelPath; got != c.kernel {
			t.Errorf("%+v: kernelPath %s, want %s", c.s, got, c.kernel)
		}
		efi := fw.Bootloader != nil && fw.Bootloader.EFI != nil
		if efi != c.efi {
			t.Errorf("%+v: efi %v", c.s, efi)
		}
		if efi && (*fw.Bootloader.EFI.SecureBoot || (fw.Bootloader.EFI.Persistent != nil && *fw.Bootloader.EFI.Persistent) != c.efiPersist) {
			t.Errorf("%+v: efi %+v", c.s, fw.Bootloader.EFI)
		}
		tpm := v.Spec.Domain.Devices.TPM
		if (tpm != nil) != c.tpm || (tpm != nil && (tpm.Persistent != nil && *tpm.Persistent) != c.tpmPersist) {
			t.Errorf("%+v: tpm %+v", c.s, tpm)
		}
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{{"abc", 5, "abc"}, {"abcdef", 3, "...def"}, {"", 0, ""}} {
		if got := Tail(c.s, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
