// Package devices makes a running domain's disks and interfaces follow its
// VMI, as KubeVirt's launcher does on every Sync: the plan (PlanChanges,
// pure: what to detach, attach, change, grow, unplug, plug and relink, and
// what cannot be done) and the Applier that makes it over a Client (the
// device calls of one domain, libvirt's in the launcher, an in-memory one
// in the tests). The Applier also makes the hotplugs virt-handler asks for
// besides Sync: vCPUs, memory and SR-IOV host devices (hotplug.go).
package devices

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// Network is the launcher's network phase for the interfaces plugged and
// unplugged while the domain runs.
type Network interface {
	// Serve starts serving VMI interface name (its DHCP), learning its
	// MAC, MTU and tap.
	Serve(ctx context.Context, v *v1.VirtualMachineInstance, name string) error
	// Interfaces converts the VMI's interfaces with the facts of those
	// served.
	Interfaces(v *v1.VirtualMachineInstance) ([]libvirtxml.DomainInterface, error)
	// Stop stops serving interface name and forgets its facts.
	Stop(name string) error
}

// Applier makes a Plan's changes to one domain.
type Applier struct {
	Client Client
	// Network is nil when the launcher has no network phase: an
	// interface to plug is then refused.
	Network Network
	Log     *slog.Logger
	// HotplugDir is the directory virt-handler mounts hotplugged volumes
	// into.
	HotplugDir string

	// wait is DetachWait outside tests.
	wait time.Duration
}

func (a *Applier) detachWait() time.Duration {
	if a.wait > 0 {
		return a.wait
	}
	return DetachWait
}

// Apply makes plan's changes in its order: disks of hotplugged volumes
// detached and attached, CD-ROM media changed, disks grown, interfaces
// unplugged and plugged, link states set, each confirmed by libvirt. It
// stops at the first failure. changed reports whether the domain's devices
// may have changed (the Domain must be read again), also on a failure.
func (a *Applier) Apply(ctx context.Context, v *v1.VirtualMachineInstance, plan Plan) (changed bool, err error) {
	changed = len(plan.Detach)+len(plan.Attach)+len(plan.Media)+len(plan.Unplug)+len(plan.Plug)+len(plan.Links) > 0
	for _, disk := range plan.Detach {
		if err := a.detachDisk(ctx, disk); err != nil {
			return changed, err
		}
	}
	for _, disk := range plan.Attach {
		if err := a.attachDisk(ctx, disk); err != nil {
			return changed, err
		}
	}
	for _, disk := range plan.Media {
		if err := a.changeMedium(ctx, disk); err != nil {
			return changed, err
		}
	}
	for _, c := range plan.Grow {
		grown, err := a.growDisk(ctx, c)
		changed = changed || grown
		if err != nil {
			return changed, err
		}
	}
	for _, iface := range plan.Unplug {
		if err := a.detachInterface(ctx, iface); err != nil {
			return changed, err
		}
	}
	if len(plan.Plug) > 0 {
		if err := a.plugInterfaces(ctx, v, plan.Plug); err != nil {
			return changed, err
		}
	}
	for _, iface := range plan.Links {
		if err := a.setLink(ctx, iface); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

// FollowDefinition brings the domain's definition back to the running
// domain's hotplugged disks (live) where a daemon that died during a
// hotplug or an unplug left them apart (definitionDrift), before a Sync
// plans its changes from the running domain. It says whether it changed
// the definition: the running domain then changed without the call the
// Sync would have made, and what was read of it before may be stale.
func (a *Applier) FollowDefinition(ctx context.Context, live *libvirtxml.Domain) (bool, error) {
	def, err := a.Client.XML(ctx, true)
	if err != nil {
		return false, fmt.Errorf("sync: %w", err)
	}
	drop, add := definitionDrift(live, def, a.HotplugDir)
	repaired := false
	for _, list := range []struct {
		disks []libvirtxml.DomainDisk
		verb  string
		call  func(ctx context.Context, what, xml string, scope Scope) error
	}{{drop, "detach", a.Client.Detach}, {add, "attach", a.Client.Attach}} {
		for _, disk := range list.disks {
			name, _ := userAlias(disk.Alias)
			x, err := disk.Marshal()
			if err != nil {
				return repaired, fmt.Errorf("sync: disk %q: %w", name, err)
			}
			a.Log.Warn("the definition disagrees with the running domain on a hotplugged disk (a daemon died during a hotplug or unplug): "+list.verb+"ing it in the definition", "disk", name)
			if err := list.call(ctx, list.verb+" the disk in the definition", x, Config); err != nil {
				return repaired, fmt.Errorf("sync: disk %q: %s it in the definition, as the running domain has it: %w", name, list.verb, err)
			}
			repaired = true
		}
	}
	return repaired, nil
}
