package compute

import (
	"fmt"
	"path"
	"path/filepath"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// OS fills <os>: guest type and machine, SMBIOS mode, firmware (BIOS or EFI
// pflash with its NVRAM), kernel boot, ACPI tables and the boot menu.
type OS struct{ Ctx *facts.Context }

// defaultMachine is the machine type of each architecture the converter
// supports; an architecture missing here is refused.
var defaultMachine = map[string]string{"amd64": "q35", "arm64": "virt", "s390x": "s390-ccw-virtio"}

func (o OS) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	a := arch(vmi, o.Ctx)
	machine, ok := defaultMachine[a]
	if !ok {
		return fmt.Errorf("spec.architecture: %q is not supported, use amd64, arm64 or s390x", a)
	}
	out := domainOS(dom)
	out.Type = &libvirtxml.DomainOSType{Type: "hvm", Arch: facts.LibvirtArch(a), Machine: machine}
	if m := vmi.Spec.Domain.Machine; m != nil && m.Type != "" {
		out.Type.Machine = m.Type
	}
	if a != "s390x" && len(dom.SysInfo) > 0 {
		out.SMBios = &libvirtxml.DomainSMBios{Mode: "sysinfo"}
	}
	if vmi.Spec.StartStrategy != nil && *vmi.Spec.StartStrategy == v1.StartStrategyPaused {
		out.BootMenu = &libvirtxml.DomainBootMenu{Enable: "yes", Timeout: "10000"}
	}
	fw := vmi.Spec.Domain.Firmware
	if fw == nil {
		return nil
	}
	if bl := fw.Bootloader; bl != nil {
		if bl.BIOS != nil && bl.EFI != nil {
			return fmt.Errorf("spec.domain.firmware.bootloader: bios and efi are mutually exclusive")
		}
		if bl.BIOS != nil && bl.BIOS.UseSerial != nil && *bl.BIOS.UseSerial {
			out.BIOS = &libvirtxml.DomainBIOS{UseSerial: "yes"}
		}
		if bl.EFI != nil {
			if err := o.efi(vmi, out); err != nil {
				return err
			}
		}
	}
	if kb := fw.KernelBoot; kb != nil {
		if err := o.kernelBoot(kb, out); err != nil {
			return err
		}
	}
	if acpi := fw.ACPI; acpi != nil {
		if acpi.MsdmNameRef != "" {
			return fmt.Errorf("spec.domain.firmware.acpi.msdmNameRef: not supported (libvirt 9.0 has no MSDM table)")
		}
		if acpi.SlicNameRef != "" {
			if err := secretVolume(vmi, acpi.SlicNameRef); err != nil {
				return fmt.Errorf("spec.domain.firmware.acpi.slicNameRef: %w", err)
			}
			out.ACPI = &libvirtxml.DomainACPI{Tables: []libvirtxml.DomainACPITable{{
				Type: "slic", Path: filepath.Join(o.Ctx.Layout.SecretSource(acpi.SlicNameRef), "slic.bin"),
			}}}
		}
	}
	return nil
}

// efi picks the pflash firmware from the Context: the secure-boot pair when
// secure boot is on (nil counts as on), else the plain pair.
func (o OS) efi(vmi *v1.VirtualMachineInstance, out *libvirtxml.DomainOS) error {
	code, vars, secure := o.Ctx.EFI.Code, o.Ctx.EFI.Vars, "no"
	what := "EFI"
	if secureBoot(vmi) {
		code, vars, secure = o.Ctx.EFI.SecureCode, o.Ctx.EFI.SecureVars, "yes"
		what = "secure boot EFI"
	}
	if code == "" || vars == "" {
		return fmt.Errorf("spec.domain.firmware.bootloader.efi: %s firmware (code and variables) is not installed on this host", what)
	}
	if err := layout.CheckName(vmi.Name); err != nil {
		return fmt.Errorf("metadata.name: %w", err)
	}
	out.Loader = &libvirtxml.DomainLoader{Path: code, Readonly: "yes", Secure: secure, Type: "pflash"}
	out.NVRam = &libvirtxml.DomainNVRam{
		NVRam:    filepath.Join(o.Ctx.Layout.NVRAMDir(!o.Ctx.NonRoot), vmi.Name+"_VARS.fd"),
		Template: vars,
	}
	return nil
}

func (o OS) kernelBoot(kb *v1.KernelBoot, out *libvirtxml.DomainOS) error {
	const field = "spec.domain.firmware.kernelBoot"
	if kb.Container == nil {
		if kb.KernelArgs != "" {
			return fmt.Errorf("%s.kernelArgs: needs a kernel boot container", field)
		}
		return nil
	}
	if kb.Container.KernelPath == "" {
		return fmt.Errorf("%s.container.kernelPath: must be set", field)
	}
	kernel, err := kernelBootFile(o.Ctx, kb.Container.KernelPath)
	if err != nil {
		return fmt.Errorf("%s.container.kernelPath: %w", field, err)
	}
	out.Kernel = kernel
	if p := kb.Container.InitrdPath; p != "" {
		if out.Initrd, err = kernelBootFile(o.Ctx, p); err != nil {
			return fmt.Errorf("%s.container.initrdPath: %w", field, err)
		}
	}
	out.Cmdline = kb.KernelArgs
	return nil
}

// kernelBootFile is where the launcher finds a file of the kernel boot
// container: its base name in the kernel-boot directory.
func kernelBootFile(c *facts.Context, p string) (string, error) {
	base := path.Base(p)
	if err := layout.CheckName(base); err != nil || base == "/" {
		return "", fmt.Errorf("%q does not name a file", p)
	}
	return filepath.Join(c.Layout.KernelBootDir(), base), nil
}

// secretVolume checks that name is a Secret volume of the VMI.
func secretVolume(vmi *v1.VirtualMachineInstance, name string) error {
	for _, v := range vmi.Spec.Volumes {
		if v.Name == name {
			if v.Secret == nil {
				return fmt.Errorf("volume %q is not a secret volume", name)
			}
			return nil
		}
	}
	return fmt.Errorf("no volume named %q", name)
}
