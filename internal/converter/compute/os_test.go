package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestOS(t *testing.T) {
	efi := func(secure *bool) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: secure}}
		}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "bios", Contains: []string{`<type arch="x86_64" machine="q35">hvm</type>`, `<smbios mode="sysinfo">`}, Absent: []string{"<loader", "<nvram", "<bios"}},
		{Name: "bios serial", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{BIOS: &v1.BIOS{UseSerial: convtest.Ptr(true)}}
		}, Contains: []string{`<bios useserial="yes">`}},
		{Name: "machine default", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Machine = nil },
			Contains: []string{`machine="q35"`}},
		{Name: "efi insecure", VMI: efi(convtest.Ptr(false)), Contains: []string{
			`<loader readonly="yes" secure="no" type="pflash">/usr/share/OVMF/OVMF_CODE_4M.fd</loader>`,
			`<nvram template="/usr/share/OVMF/OVMF_VARS_4M.fd">/var/run/kubevirt-private/libvirt/qemu/nvram/testvmi_VARS.fd</nvram>`,
			`<model type="bochs" heads="1">`}, Absent: []string{"<smm"}},
		{Name: "efi root pod", VMI: efi(convtest.Ptr(false)), Ctx: func(c *facts.Context) { c.NonRoot = false }, Contains: []string{
			`<nvram template="/usr/share/OVMF/OVMF_VARS_4M.fd">/var/lib/libvirt/qemu/nvram/testvmi_VARS.fd</nvram>`}},
		{Name: "efi persistent", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{SecureBoot: convtest.Ptr(false), Persistent: convtest.Ptr(true)}}
		}, Contains: []string{
			`<nvram template="/usr/share/OVMF/OVMF_VARS_4M.fd">/var/run/kubevirt-private/libvirt/qemu/nvram/testvmi_VARS.fd</nvram>`}},
		{Name: "efi secure by default", VMI: efi(nil), Contains: []string{
			`<loader readonly="yes" secure="yes" type="pflash">/usr/share/OVMF/OVMF_CODE_4M.secboot.fd</loader>`,
			`template="/usr/share/OVMF/OVMF_VARS_4M.ms.fd"`, `<smm state="on">`}},
		{Name: "efi vga when bochs is off", VMI: efi(convtest.Ptr(false)), Ctx: func(c *facts.Context) { c.BochsForEFIGuests = false },
			Contains: []string{`<model type="vga" heads="1" vram="16384">`}},
		{Name: "secure firmware missing", VMI: efi(nil), Ctx: func(c *facts.Context) { c.EFI.SecureCode = "" },
			Err: "spec.domain.firmware.bootloader.efi: secure boot EFI firmware (code and variables) is not installed"},
		{Name: "firmware missing", VMI: efi(convtest.Ptr(false)), Ctx: func(c *facts.Context) { c.EFI = facts.EFI{} },
			Err: "spec.domain.firmware.bootloader.efi: EFI firmware"},
		{Name: "bios and efi", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}, BIOS: &v1.BIOS{}}
		}, Err: "mutually exclusive"},
		{Name: "kernel boot", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot = &v1.KernelBoot{KernelArgs: "console=ttyS0", Container: &v1.KernelBootContainer{
				Image: "k", KernelPath: "/boot/vmlinuz-virt", InitrdPath: "/boot/initramfs-virt"}}
		}, Contains: []string{
			`<kernel>/var/run/kubevirt/container-disks/kernel-boot/vmlinuz-virt</kernel>`,
			`<initrd>/var/run/kubevirt/container-disks/kernel-boot/initramfs-virt</initrd>`,
			`<cmdline>console=ttyS0</cmdline>`}},
		{Name: "kernel boot without kernel", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k", InitrdPath: "/i"}}
		}, Err: "spec.domain.firmware.kernelBoot.container.kernelPath: must be set"},
		{Name: "kernel path that names no file", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot = &v1.KernelBoot{Container: &v1.KernelBootContainer{Image: "k", KernelPath: "/boot/.."}}
		}, Err: "kernelPath"},
		{Name: "paused start shows the boot menu", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.StartStrategy = convtest.Ptr(v1.StartStrategyPaused)
		}, Contains: []string{`<bootmenu enable="yes" timeout="10000">`}},
		{Name: "slic table", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.ACPI = &v1.ACPI{SlicNameRef: "slic"}
			v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "slic", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}})
		}, Contains: []string{`<table type="slic">/var/run/kubevirt-private/secret/slic/slic.bin</table>`}},
		{Name: "slic not a secret", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.ACPI = &v1.ACPI{SlicNameRef: "containerdisk"}
		},
			Err: `spec.domain.firmware.acpi.slicNameRef: volume "containerdisk" is not a secret volume`},
		{Name: "unknown arch", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Architecture = "riscv64" },
			Err: `spec.architecture: "riscv64" is not supported`},
		{Name: "s390x has no smbios mode", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Architecture = "s390x"
			v.Spec.Domain.Machine.Type = "s390-ccw-virtio"
		}, Contains: []string{`<type arch="s390x" machine="s390-ccw-virtio">hvm</type>`}, Absent: []string{"<smbios", "vmport"}},
	})
}
