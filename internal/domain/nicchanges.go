package domain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
)

// findInterface is the interface with the user alias of VMI interface name.
func findInterface(ifaces []libvirtxml.DomainInterface, name string) (libvirtxml.DomainInterface, bool) {
	for _, i := range ifaces {
		if n, ok := userAlias(i.Alias); ok && n == name {
			return i, true
		}
	}
	return libvirtxml.DomainInterface{}, false
}

// detachInterface unplugs an interface whose VMI interface is absent now,
// waits until the guest has let go of it (a PCIe device: the guest must
// acknowledge), and only then stops serving it DHCP.
func (m *Manager) detachInterface(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, iface libvirtxml.DomainInterface) error {
	name, _ := userAlias(iface.Alias)
	m.log.Info("detaching interface", "interface", name, "tap", iface.Target.Dev)
	if err := m.detachDevice(ctx, l, d, "interface", name, &iface, func(dom *libvirtxml.Domain) bool {
		_, there := findInterface(dom.Devices.Interfaces, name)
		return there
	}); err != nil {
		return err
	}
	delete(m.netIfaces, name)
	if m.cfg.Network == nil {
		return nil
	}
	if err := m.cfg.Network.Stop(name); err != nil {
		return fmt.Errorf("sync: interface %q: detached, but: %w", name, err)
	}
	return nil
}

// plugInterfaces hotplugs the named VMI interfaces: each is served DHCP
// first (the network phase reads what virt-handler's privileged phase
// prepared for it, and tells its MAC, MTU and tap), then converted as at
// the define and attached live and in the definition, on a free
// pcie-root-port, and confirmed in the running domain. An interface whose
// attach fails is no longer served.
func (m *Manager) plugInterfaces(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance, names []string) error {
	if m.cfg.Network == nil {
		return fmt.Errorf("sync: interface %q: no network phase in this launcher to wire it", names[0])
	}
	// One at a time, as KubeVirt does: a failure names its interface
	// and leaves the ones before it plugged.
	for _, name := range names {
		ifs, err := m.cfg.Network.Serve(ctx, v, m.attach, name)
		if err != nil {
			return fmt.Errorf("sync: interface %q: %w", name, err)
		}
		m.netIfaces = ifs
		if err := m.attachInterface(ctx, l, d, v, name); err != nil {
			if serr := m.cfg.Network.Stop(name); serr != nil {
				err = errors.Join(err, serr)
			}
			delete(m.netIfaces, name)
			return err
		}
	}
	return nil
}

// attachInterface converts VMI interface name with the network facts and
// attaches it.
func (m *Manager) attachInterface(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, v *v1.VirtualMachineInstance, name string) error {
	c, err := m.baseFacts()
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	c.Interfaces, c.DomainAttachments = m.netIfaces, m.attach
	all, err := converter.Interfaces(v, c)
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	iface, ok := findInterface(all, name)
	if !ok {
		return fmt.Errorf("sync: interface %q: the converter made no <interface> for it", name)
	}
	x, err := iface.Marshal()
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	t0 := time.Now()
	if err := withContext(ctx, "attach the interface", func() error { return l.DomainAttachDeviceFlags(d, x, uint32(liveAndConfig)) }); err != nil {
		return fmt.Errorf("sync: interface %q (tap %s): %w", name, iface.Target.Dev, err)
	}
	live, err := m.liveXML(ctx, l, d, 0)
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	got, there := findInterface(live.Devices.Interfaces, name)
	if !there {
		return fmt.Errorf("sync: interface %q: libvirt accepted the attach, but the running domain does not have it", name)
	}
	mac := ""
	if got.MAC != nil {
		mac = got.MAC.Address
	}
	m.log.Info("interface attached", "interface", name, "mac", mac, "tap", iface.Target.Dev, "took", time.Since(t0).String())
	return nil
}

// setLink changes an interface's link state, live and in the definition
// (as KubeVirt does), and reads it back: the Sync succeeds only for a
// change libvirt confirms.
func (m *Manager) setLink(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, iface libvirtxml.DomainInterface) error {
	name, _ := userAlias(iface.Alias)
	want := iface.Link.State
	x, err := iface.Marshal()
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	if err := withContext(ctx, "update the interface", func() error { return l.DomainUpdateDeviceFlags(d, x, liveAndConfig) }); err != nil {
		return fmt.Errorf("sync: interface %q: set link %s: %w", name, want, err)
	}
	dom, err := m.liveXML(ctx, l, d, 0)
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	i, there := findInterface(dom.Devices.Interfaces, name)
	if !there {
		return fmt.Errorf("sync: interface %q: gone from the domain after its link state changed", name)
	}
	got := "up"
	if i.Link != nil && i.Link.State != "" {
		got = i.Link.State
	}
	if got != want {
		return fmt.Errorf("sync: interface %q: link %s asked, libvirt reports %s", name, want, got)
	}
	m.log.Info("interface link state changed", "interface", name, "link", want)
	return nil
}
