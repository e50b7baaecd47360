package domain

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// The calls virt-handler makes on every change of a running VMI that might
// need a hotplug besides Sync. Each answers success only for a domain that
// is (or was made) what the VMI asks for, and otherwise fails naming what
// it cannot do.

// SyncVCPUs is SyncVirtualMachineCPUs: the VMI's vCPU count (sockets x
// cores x threads) set in the running domain (devices.Applier.SetVCPUs).
// Dedicated CPUs, which KubeVirt re-pins, are refused at define.
func (m *Manager) SyncVCPUs(ctx context.Context, v *v1.VirtualMachineInstance) error {
	l, d, unlock, err := m.hotplugDomain(ctx, v, "update vCPUs")
	if err != nil {
		return err
	}
	defer unlock()
	changed, err := m.sync.applier(l, d).SetVCPUs(ctx, facts.VCPUs(v))
	if changed {
		m.watch.refresh(ctx, EventModified, true)
	}
	return err
}

// HotplugHostDevices attaches, as KubeVirt's launcher does (manager.go
// hotPlugHostDevices, sriov.GetHostDevicesToAttach), the SR-IOV interfaces
// of the VMI that Multus reported attached to the pod and the domain lacks
// (by alias, ua-sriov-<name>): their virtual functions from the
// network-info file, live and in the definition. Only SR-IOV interfaces
// are hotplugged; GPUs and host devices never are (nor in KubeVirt).
// KubeVirt answers at once and attaches in the background, logging a
// failure; this answers when the attach is done, with its error.
func (m *Manager) HotplugHostDevices(ctx context.Context, v *v1.VirtualMachineInstance) error {
	l, d, unlock, err := m.hotplugDomain(ctx, v, "hot-plug host devices")
	if err != nil {
		return err
	}
	defer unlock()
	a := m.sync.applier(l, d)
	live, err := a.Client.XML(ctx, false)
	if err != nil {
		return fmt.Errorf("hot-plug host devices: %w", err)
	}
	var devs facts.Devices
	if m.cfg.Devices != nil && len(sriovMissing(v, live)) > 0 {
		devs = m.cfg.Devices(ctx, v)
	}
	attach, err := sriovToAttach(v, &devs, live)
	if err != nil {
		return fmt.Errorf("hot-plug host devices: %w", err)
	}
	changed, err := a.AttachHostdevs(ctx, attach)
	if changed {
		m.watch.refresh(ctx, EventModified, true)
	}
	return err
}

// sriovMissing lists the SR-IOV interfaces KubeVirt's launcher would
// attach: reported by Multus in the VMI status, without a host device of
// their alias in the domain.
func sriovMissing(v *v1.VirtualMachineInstance, live *libvirtxml.Domain) []string {
	attached := map[string]bool{}
	if live != nil && live.Devices != nil {
		for _, h := range live.Devices.Hostdevs {
			if h.Alias != nil {
				attached[strings.TrimPrefix(h.Alias.Name, "ua-")] = true
			}
		}
	}
	var missing []string
	for _, iface := range v.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV != nil && !attached[hostdev.SRIOVAlias+iface.Name] && hostdev.MultusReported(v, iface.Name) {
			missing = append(missing, iface.Name)
		}
	}
	return missing
}

// sriovToAttach is the host devices of the missing SR-IOV interfaces.
func sriovToAttach(v *v1.VirtualMachineInstance, devs *facts.Devices, live *libvirtxml.Domain) ([]libvirtxml.DomainHostdev, error) {
	missing := sriovMissing(v, live)
	if len(missing) == 0 {
		return nil, nil
	}
	all, err := hostdev.SRIOV(v, devs)
	if err != nil {
		return nil, err
	}
	var out []libvirtxml.DomainHostdev
	for _, hd := range all {
		if slices.Contains(missing, strings.TrimPrefix(hd.Alias.Name, "ua-"+hostdev.SRIOVAlias)) {
			out = append(out, hd)
		}
	}
	return out, nil
}

// hotplugDomain checks the VMI is ours, takes the domain operation lock
// (unlock releases it) and finds the domain, which must exist (KubeVirt's
// launcher fails on a missing domain too).
func (m *Manager) hotplugDomain(ctx context.Context, v *v1.VirtualMachineInstance, what string) (l *libvirt.Libvirt, d libvirt.Domain, unlock func(), err error) {
	if err := m.checkIdentity(v, false); err != nil {
		return nil, libvirt.Domain{}, nil, err
	}
	if err := m.op.lock(ctx); err != nil {
		return nil, libvirt.Domain{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	l, d, ok, err := m.lookup(ctx)
	switch {
	case err != nil:
		err = fmt.Errorf("%s: %w", what, err)
	case !ok:
		err = fmt.Errorf("%s: no domain is defined", what)
	}
	if err != nil {
		m.op.unlock()
		return nil, libvirt.Domain{}, nil, err
	}
	return l, d, m.op.unlock, nil
}

// SyncMemory is SyncVirtualMachineMemory (devices.Applier.SetMemory).
func (m *Manager) SyncMemory(ctx context.Context, v *v1.VirtualMachineInstance) error {
	l, d, unlock, err := m.hotplugDomain(ctx, v, "update guest memory")
	if err != nil {
		return err
	}
	defer unlock()
	changed, err := m.sync.applier(l, d).SetMemory(ctx, v)
	if changed {
		m.watch.refresh(ctx, EventModified, true)
	}
	return err
}
