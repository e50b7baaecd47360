package domain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/converter/hostdev"
	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domain/devices"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// The calls virt-handler makes on every change of a running VMI that might
// need a hotplug besides Sync. Each answers success only for a domain that
// is (or was made) what the VMI asks for, and otherwise fails naming what
// it cannot do.

// SyncVCPUs is SyncVirtualMachineCPUs. As KubeVirt's launcher
// (manager.go UpdateVCPUs), it sets the live and config vCPU count to
// sockets x cores x threads of the VMI, within the maximum the domain was
// defined with (maxSockets x cores x threads), and reads the live count
// back. A removal needs the guest to let go of the vCPU (libvirt waits for
// it). Dedicated CPUs, which KubeVirt re-pins, are refused at define.
func (m *Manager) SyncVCPUs(ctx context.Context, v *v1.VirtualMachineInstance) error {
	l, d, unlock, err := m.hotplugDomain(ctx, v, "update vCPUs")
	if err != nil {
		return err
	}
	defer unlock()
	count := func(flags libvirt.DomainVCPUFlags) (uint64, error) {
		var n int32
		err := bounded.Call(ctx, "read the vCPU count of domain "+d.Name, func() (err error) {
			n, err = l.DomainGetVcpusFlags(d, uint32(flags))
			return err
		})
		return uint64(max(n, 0)), err
	}
	live, err := count(libvirt.DomainVCPULive)
	if err != nil {
		return fmt.Errorf("update vCPUs: %w", err)
	}
	maximum, err := count(libvirt.DomainVCPULive | libvirt.DomainVCPUMaximum)
	if err != nil {
		return fmt.Errorf("update vCPUs: %w", err)
	}
	want := facts.VCPUs(v)
	change, err := vcpuChange(want, live, maximum)
	if err != nil || !change {
		return err
	}
	m.log.Info("setting vCPUs", "from", live, "to", want)
	t0, from := time.Now(), live
	// One bound for the call and the wait after it, inside virt-handler's
	// 20 s for the RPC.
	wctx, cancel := context.WithTimeout(ctx, devices.DetachWait)
	defer cancel()
	flags := libvirt.DomainVCPULive | libvirt.DomainVCPUConfig
	setErr := bounded.Call(wctx, "set the vCPUs", func() error { return l.DomainSetVcpusFlags(d, uint32(want), uint32(flags)) })
	if setErr != nil && want > live {
		return fmt.Errorf("update vCPUs from %d to %d: %w", live, want, setErr)
	}
	// A removal libvirt gave up waiting for (5 s) may still complete: the
	// guest is asked and lets go when it gets to it. Wait for it as for a
	// detached disk.
	done, err := bounded.PollUntil(wctx, func() (bool, error) {
		live, err = count(libvirt.DomainVCPULive)
		return live == want, err
	})
	switch {
	case err != nil:
		return fmt.Errorf("update vCPUs: %w", err)
	case !done && setErr != nil:
		return fmt.Errorf("update vCPUs from %d to %d: %w", from, want, setErr)
	case !done:
		return fmt.Errorf("update vCPUs: %d asked, the domain has %d", want, live)
	}
	m.log.Info("vCPUs set", "from", from, "to", want, "took", time.Since(t0).String())
	m.watch.refresh(ctx, EventModified, true)
	return nil
}

// vcpuChange decides SyncVirtualMachineCPUs: whether the live vCPU count
// must change to want, or why it cannot (more than the domain's maximum,
// none at all).
func vcpuChange(want, live, maximum uint64) (bool, error) {
	switch {
	case want == live:
		return false, nil
	case want == 0:
		return false, fmt.Errorf("update vCPUs: the VMI asks for no vCPU")
	case want > maximum:
		return false, fmt.Errorf("update vCPUs: the VMI asks for %d vCPUs (sockets x cores x threads), more than the %d the domain can have (maxSockets x cores x threads)", want, maximum)
	}
	return true, nil
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
	live, err := devices.ReadXML(ctx, l, d, 0)
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
	for _, hd := range attach {
		x, err := hd.Marshal()
		if err != nil {
			return fmt.Errorf("hot-plug host devices: %s: %w", hd.Alias.Name, err)
		}
		if err := bounded.Call(ctx, "attach the host device", func() error { return l.DomainAttachDeviceFlags(d, x, uint32(devices.LiveAndConfig)) }); err != nil {
			return fmt.Errorf("hot-plug host devices: %s: %w", hd.Alias.Name, err)
		}
		m.log.Info("hot-plugged host device", "alias", hd.Alias.Name)
	}
	if len(attach) > 0 {
		m.watch.refresh(ctx, EventModified, true)
	}
	return nil
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

// virtioMemHotplugQemu is the first QEMU version (libvirt's encoding) the
// launcher hotplugs a virtio-mem device into.
const virtioMemHotplugQemu = 8_000_000

// SyncMemory is SyncVirtualMachineMemory. As KubeVirt's launcher
// (manager.go UpdateGuestMemory, liveupdate/memory BuildMemoryDevice), the
// memory above the boot size is a virtio-mem device of maxGuest − boot
// size whose requested size is guest − boot size: attached (live and
// config) the first time, its requested size updated (live) after that,
// and read back. On a QEMU older than 8.0 the device was defined with the
// domain, empty, and is only updated.
func (m *Manager) SyncMemory(ctx context.Context, v *v1.VirtualMachineInstance) error {
	l, d, unlock, err := m.hotplugDomain(ctx, v, "update guest memory")
	if err != nil {
		return err
	}
	defer unlock()
	live, err := devices.ReadXML(ctx, l, d, 0)
	if err != nil {
		return fmt.Errorf("update guest memory: %w", err)
	}
	dev, attach, err := memoryChange(v, live)
	if err != nil || dev == nil {
		return err
	}
	x, err := dev.Marshal()
	if err != nil {
		return fmt.Errorf("update guest memory: %w", err)
	}
	want := dev.Target.Requested.Value
	if attach {
		ver, err := hypervisorVersion(ctx, l)
		if err != nil {
			return fmt.Errorf("update guest memory: %w", err)
		}
		if ver < virtioMemHotplugQemu {
			// Seen here: QEMU 7.2 (Debian 12) dies in malloc on the
			// device_add of a virtio-mem device, taking the guest with
			// it. A domain this launcher defined on such a QEMU has the
			// device from the start (facts.VirtioMemAtDefine); one
			// without it keeps the memory it has.
			return fmt.Errorf("update guest memory: the domain has no virtio-mem device, and attaching one crashes %s (the guest would die): the VM keeps its memory until it restarts", formatQemuVersion(ver))
		}
	}
	m.log.Info("setting hotplugged memory", "requestedKiB", want, "attach", attach)
	if attach {
		err = bounded.Call(ctx, "attach the virtio-mem device", func() error { return l.DomainAttachDeviceFlags(d, x, uint32(devices.LiveAndConfig)) })
	} else {
		err = bounded.Call(ctx, "update the virtio-mem device", func() error {
			return l.DomainUpdateDeviceFlags(d, x, libvirt.DomainDeviceModifyLive)
		})
	}
	if err != nil {
		return fmt.Errorf("update guest memory to %d KiB above the boot size: %w", want, err)
	}
	if live, err = devices.ReadXML(ctx, l, d, 0); err != nil {
		return fmt.Errorf("update guest memory: %w", err)
	}
	got, ok := virtioMem(live)
	if !ok || got.Target == nil || got.Target.Requested == nil {
		return fmt.Errorf("update guest memory: the domain has no virtio-mem device after the change")
	}
	if b, err := kib(got.Target.Requested.Value, got.Target.Requested.Unit); err != nil || b != uint64(want) {
		return fmt.Errorf("update guest memory: %d KiB asked above the boot size, libvirt reports %d %s", want, got.Target.Requested.Value, got.Target.Requested.Unit)
	}
	m.watch.refresh(ctx, EventModified, true)
	return nil
}

// memoryChange decides SyncVirtualMachineMemory from the VMI and the live
// domain: the virtio-mem device to attach (attach) or to update, nil when
// it already has the requested size, or why the change cannot be made.
// Sizes are in KiB, as libvirt reports them.
func memoryChange(v *v1.VirtualMachineInstance, live *libvirtxml.Domain) (*libvirtxml.DomainMemorydev, bool, error) {
	mem := v.Spec.Domain.Memory
	switch {
	case mem == nil || mem.Guest == nil:
		return nil, false, errors.New("update guest memory: spec.domain.memory.guest is not set")
	case mem.MaxGuest == nil:
		return nil, false, errors.New("update guest memory: spec.domain.memory.maxGuest is not set: the VM was not started for memory hotplug")
	case v.Status.Memory == nil || v.Status.Memory.GuestAtBoot == nil:
		return nil, false, errors.New("update guest memory: status.memory.guestAtBoot is not set")
	}
	boot := v.Status.Memory.GuestAtBoot.Value()
	want, err := compute.VirtioMem(v, boot, mem.Guest.Value()-boot)
	if err != nil {
		return nil, false, fmt.Errorf("update guest memory: %w", err)
	}
	requested := want.Target.Requested.Value
	if have, ok := virtioMem(live); ok {
		if have.Target != nil && have.Target.Requested != nil {
			if b, err := kib(have.Target.Requested.Value, have.Target.Requested.Unit); err == nil && b == uint64(requested) {
				return nil, false, nil
			}
		}
		changed := have
		target := *have.Target
		target.Requested = want.Target.Requested
		changed.Target = &target
		return &changed, false, nil
	}
	if requested == 0 {
		return nil, false, nil
	}
	return want, true, nil
}

// virtioMem finds the domain's virtio-mem device.
func virtioMem(d *libvirtxml.Domain) (libvirtxml.DomainMemorydev, bool) {
	if d.Devices != nil {
		for _, md := range d.Devices.Memorydevs {
			if md.Model == "virtio-mem" {
				return md, true
			}
		}
	}
	return libvirtxml.DomainMemorydev{}, false
}

// kib converts a libvirt size (value and unit, KiB when none) to KiB.
func kib(value uint, unit string) (uint64, error) {
	shift := map[string]uint{"b": 0, "bytes": 0, "": 10, "k": 10, "KiB": 10, "M": 20, "MiB": 20, "G": 30, "GiB": 30, "T": 40, "TiB": 40}
	s, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("unknown size unit %q", unit)
	}
	return (uint64(value) << s) >> 10, nil
}
