package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// USBRedir adds KubeVirt's four USB redirection slots, each a unix socket in
// the VMI's private directory, when clientPassthrough is set.
type USBRedir struct{ Ctx *facts.Context }

func (u USBRedir) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if vmi.Spec.Domain.Devices.ClientPassthrough == nil {
		return nil
	}
	if vmi.UID == "" {
		return fmt.Errorf("metadata.uid: needed for the USB redirection socket paths, but empty")
	}
	for i := range v1.UsbClientPassthroughMaxNumberOf {
		devices(dom).RedirDevs = append(devices(dom).RedirDevs, libvirtxml.DomainRedirDev{
			Bus: "usb",
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{
				Mode: "bind", Path: u.Ctx.Layout.USBRedirSocket(string(vmi.UID), i),
			}},
		})
	}
	return nil
}
