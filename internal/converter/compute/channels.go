package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// GuestAgentChannel is the virtio-serial port name of the QEMU guest agent.
const GuestAgentChannel = "org.qemu.guest_agent.0"

// DownwardMetricsChannel is the virtio-serial port name vhostmd listens on.
const DownwardMetricsChannel = "org.github.vhostmd.1"

// Channels adds the guest agent channel, always, with no source path (libvirt
// picks one in its own run directory), and the downward metrics channel when
// devices.downwardMetrics is set.
type Channels struct{ Ctx *facts.Context }

func (c Channels) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	devs := devices(dom)
	devs.Channels = append(devs.Channels, libvirtxml.DomainChannel{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{}},
		Target: &libvirtxml.DomainChannelTarget{
			VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: GuestAgentChannel},
		},
	})
	if vmi.Spec.Domain.Devices.DownwardMetrics != nil {
		devs.Channels = append(devs.Channels, libvirtxml.DomainChannel{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{
				Mode: "bind",
				Path: c.Ctx.Layout.DownwardMetricsSocket(),
			}},
			Target: &libvirtxml.DomainChannelTarget{
				VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: DownwardMetricsChannel},
			},
		})
	}
	return nil
}
