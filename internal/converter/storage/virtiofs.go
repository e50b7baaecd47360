package storage

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// virtiofsQueueSize is the request queue size KubeVirt gives every virtiofs
// device.
const virtiofsQueueSize = 1024

type virtiofs struct{ ctx *facts.Context }

// NewVirtiofs returns the filesystem configurator: one vhost-user-fs device
// per virtiofs filesystem, its target (the tag the guest mounts) the
// filesystem's name, its socket where that filesystem's virtiofsd listens
// (in a pod, the virtiofsd container virt-controller adds for it). The
// shared memory such a device needs is MemoryBacking's.
func NewVirtiofs(c *facts.Context) facts.Configurator { return virtiofs{ctx: c} }

func (f virtiofs) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	for i, fs := range vmi.Spec.Domain.Devices.Filesystems {
		if fs.Virtiofs == nil {
			continue
		}
		if err := layout.CheckName(fs.Name); err != nil {
			return fmt.Errorf("spec.domain.devices.filesystems[%d].name: %w", i, err)
		}
		dom.Devices.Filesystems = append(dom.Devices.Filesystems, libvirtxml.DomainFilesystem{
			AccessMode: "passthrough",
			Driver:     &libvirtxml.DomainFilesystemDriver{Type: "virtiofs", Queue: virtiofsQueueSize},
			Source:     &libvirtxml.DomainFilesystemSource{Mount: &libvirtxml.DomainFilesystemSourceMount{Socket: f.ctx.Layout.VirtiofsSocket(fs.Name)}},
			Target:     &libvirtxml.DomainFilesystemTarget{Dir: fs.Name},
		})
	}
	return nil
}
