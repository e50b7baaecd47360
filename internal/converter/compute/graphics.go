package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Graphics adds VNC on a unix socket in the VMI's private directory, plus the
// video device it displays, unless autoattachGraphicsDevice is false.
type Graphics struct{ Ctx *facts.Context }

func (g Graphics) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if !notFalse(vmi.Spec.Domain.Devices.AutoattachGraphicsDevice) {
		return nil
	}
	if vmi.UID == "" {
		return fmt.Errorf("metadata.uid: needed for the VNC socket path, but empty")
	}
	devs := devices(dom)
	devs.Graphics = append(devs.Graphics, libvirtxml.DomainGraphic{
		VNC: &libvirtxml.DomainGraphicVNC{
			Listeners: []libvirtxml.DomainGraphicListener{{
				Socket: &libvirtxml.DomainGraphicListenerSocket{Socket: g.Ctx.Layout.VNCSocket(string(vmi.UID))},
			}},
		},
	})
	model := &libvirtxml.DomainVideoModel{Heads: 1}
	switch {
	case vmi.Spec.Domain.Devices.Video != nil && vmi.Spec.Domain.Devices.Video.Type != "":
		model.Type = vmi.Spec.Domain.Devices.Video.Type
		model.VRam = 16384
	case arch(vmi, g.Ctx) != "amd64":
		model.Type = "virtio"
	case isEFI(vmi) && g.Ctx.BochsForEFIGuests:
		model.Type = "bochs"
	default:
		model.Type = "vga"
		model.VRam = 16384
	}
	if model.Type == "virtio" || model.Type == "bochs" || model.Type == "ramfb" {
		model.VRam = 0 // libvirt refuses vram on these
	}
	devs.Videos = append(devs.Videos, libvirtxml.DomainVideo{Model: *model})
	return nil
}

// isEFI reports whether the VMI boots with EFI firmware.
func isEFI(vmi *v1.VirtualMachineInstance) bool {
	fw := vmi.Spec.Domain.Firmware
	return fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil
}
