package devices

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// detachInterface unplugs an interface whose VMI interface is absent now,
// waits until the guest has let go of it (a PCIe device: the guest must
// acknowledge), and only then stops serving it DHCP.
func (a *Applier) detachInterface(ctx context.Context, iface libvirtxml.DomainInterface) error {
	name, _ := userAlias(iface.Alias)
	a.Log.Info("detaching interface", "interface", name, "tap", iface.Target.Dev)
	if err := a.detachDevice(ctx, "interface", name, &iface, func(dom *libvirtxml.Domain) bool {
		_, there := findInterface(dom.Devices.Interfaces, name)
		return there
	}); err != nil {
		return err
	}
	if a.Network == nil {
		return nil
	}
	if err := a.Network.Stop(name); err != nil {
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
func (a *Applier) plugInterfaces(ctx context.Context, v *v1.VirtualMachineInstance, names []string) error {
	if a.Network == nil {
		return fmt.Errorf("sync: interface %q: no network phase in this launcher to wire it", names[0])
	}
	// One at a time, as KubeVirt does: a failure names its interface
	// and leaves the ones before it plugged.
	for _, name := range names {
		if err := a.Network.Serve(ctx, v, name); err != nil {
			return fmt.Errorf("sync: interface %q: %w", name, err)
		}
		if err := a.attachInterface(ctx, v, name); err != nil {
			if serr := a.Network.Stop(name); serr != nil {
				err = errors.Join(err, serr)
			}
			return err
		}
	}
	return nil
}

// attachInterface converts VMI interface name with the network facts and
// attaches it.
func (a *Applier) attachInterface(ctx context.Context, v *v1.VirtualMachineInstance, name string) error {
	all, err := a.Network.Interfaces(v)
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
	if err := a.Client.Attach(ctx, "attach the interface", x, LiveAndConfig); err != nil {
		return fmt.Errorf("sync: interface %q (tap %s): %w", name, iface.Target.Dev, err)
	}
	live, err := a.Client.XML(ctx, false)
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
	a.Log.Info("interface attached", "interface", name, "mac", mac, "tap", iface.Target.Dev, "took", time.Since(t0).String())
	return nil
}

// setLink changes an interface's link state, live and in the definition
// (as KubeVirt does), and reads it back: the Sync succeeds only for a
// change libvirt confirms.
func (a *Applier) setLink(ctx context.Context, iface libvirtxml.DomainInterface) error {
	name, _ := userAlias(iface.Alias)
	want := iface.Link.State
	x, err := iface.Marshal()
	if err != nil {
		return fmt.Errorf("sync: interface %q: %w", name, err)
	}
	if err := a.Client.Update(ctx, "update the interface", x, LiveAndConfig); err != nil {
		return fmt.Errorf("sync: interface %q: set link %s: %w", name, want, err)
	}
	dom, err := a.Client.XML(ctx, false)
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
	a.Log.Info("interface link state changed", "interface", name, "link", want)
	return nil
}

// linkRefreshPause is how long a refreshed link stays down: KubeVirt's
// launcher waits as long, since some guests ignore a down and up that
// come at once.
const linkRefreshPause = 100 * time.Millisecond

// RefreshLinks sets each named interface's link down and then back to the
// state it had (live and in the definition), as KubeVirt's
// reconnectGuestNics. A name the domain has no interface for is skipped,
// as there.
func (a *Applier) RefreshLinks(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	live, err := a.Client.XML(ctx, false)
	if err != nil {
		return fmt.Errorf("finalize migration: %w", err)
	}
	for _, name := range names {
		iface, ok := findInterface(live.Devices.Interfaces, name)
		if !ok {
			a.Log.Info("link refresh: no such interface in the domain", "interface", name)
			continue
		}
		up, err := iface.Marshal()
		if err != nil {
			return fmt.Errorf("finalize migration: interface %q: %w", name, err)
		}
		downIface := iface
		downIface.Link = &libvirtxml.DomainInterfaceLink{State: "down"}
		down, err := downIface.Marshal()
		if err != nil {
			return fmt.Errorf("finalize migration: interface %q: %w", name, err)
		}
		if err := a.Client.Update(ctx, "set the link down", down, LiveAndConfig); err != nil {
			return fmt.Errorf("finalize migration: interface %q: link refresh: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("finalize migration: interface %q: link left down: %w", name, ctx.Err())
		case <-time.After(linkRefreshPause):
		}
		if err := a.Client.Update(ctx, "set the link up", up, LiveAndConfig); err != nil {
			return fmt.Errorf("finalize migration: interface %q: link refresh: %w", name, err)
		}
		a.Log.Info("interface link refreshed", "interface", name)
	}
	return nil
}
