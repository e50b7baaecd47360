// Package hostdev converts the VMI's hostdev devices. (Stub: being written.)
package hostdev

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/facts"
)

type configurator struct{ ctx *facts.Context }

// New returns the configurator for this concern.
func New(c *facts.Context) facts.Configurator { return configurator{ctx: c} }

// Configure is not written yet.
func (configurator) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	return nil
}
