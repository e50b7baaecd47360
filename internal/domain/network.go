package domain

import (
	"context"
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// netPhase is the launcher's network phase as the manager runs it: started
// once per launcher, then serving the interfaces plugged later and no
// longer the unplugged ones (devices.Network). It is used under the
// manager's operation lock.
type netPhase struct {
	network   Network // nil: none
	baseFacts func() (*facts.Context, error)

	started bool
	ifaces  map[string]facts.Interface
	// attach is virt-handler's InterfaceDomainAttachment as at the
	// network's start, for interfaces plugged later.
	attach map[string]string
}

// start runs the network phase once per launcher: the DHCP servers live
// in this process, so a restarted launcher starts them again even when the
// domain already exists.
func (n *netPhase) start(ctx context.Context, v *v1.VirtualMachineInstance, attach map[string]string) error {
	if n.started {
		// virt-handler computes the attachments from the VMI's interfaces
		// at every Sync: a plugged interface's is in the newest.
		if attach != nil {
			n.attach = attach
		}
		return nil
	}
	if n.network == nil {
		return nil
	}
	ifs, err := n.network.Serve(ctx, v, attach)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	n.started, n.ifaces, n.attach = true, ifs, attach
	return nil
}

// Serve implements devices.Network: it serves interface name, and keeps
// the facts of every interface served.
func (n *netPhase) Serve(ctx context.Context, v *v1.VirtualMachineInstance, name string) error {
	ifs, err := n.network.Serve(ctx, v, n.attach, name)
	if err != nil {
		return err
	}
	n.ifaces = ifs
	return nil
}

// Interfaces implements devices.Network: the VMI's interfaces converted as
// at the define, with the facts of the interfaces served.
func (n *netPhase) Interfaces(v *v1.VirtualMachineInstance) ([]libvirtxml.DomainInterface, error) {
	c, err := n.baseFacts()
	if err != nil {
		return nil, err
	}
	c.Interfaces, c.DomainAttachments = n.ifaces, n.attach
	return converter.Interfaces(v, c)
}

// Stop implements devices.Network.
func (n *netPhase) Stop(name string) error {
	delete(n.ifaces, name)
	return n.network.Stop(name)
}

// close stops serving every interface.
func (n *netPhase) close() error {
	if !n.started {
		return nil
	}
	n.started = false
	return n.network.Close()
}
