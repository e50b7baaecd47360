package devices

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter/compute"
	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// The hotplugs virt-handler asks for besides Sync
// (SyncVirtualMachineCPUs, SyncVirtualMachineMemory, HotplugHostDevices),
// made over the same Client as Sync's device changes. Each reports
// changed once the domain is what was asked (the Domain must then be read
// again), and otherwise fails naming what it could not do.

// SetVCPUs is SyncVirtualMachineCPUs. As KubeVirt's launcher (manager.go
// UpdateVCPUs), it sets the live and config vCPU count to want (sockets x
// cores x threads of the VMI), within the maximum the domain was defined
// with (maxSockets x cores x threads), and reads the live count back. A
// removal needs the guest to let go of the vCPU (libvirt waits for it).
func (a *Applier) SetVCPUs(ctx context.Context, want uint64) (changed bool, err error) {
	live, err := a.Client.VCPUs(ctx, false)
	if err != nil {
		return false, fmt.Errorf("update vCPUs: %w", err)
	}
	maximum, err := a.Client.VCPUs(ctx, true)
	if err != nil {
		return false, fmt.Errorf("update vCPUs: %w", err)
	}
	change, err := vcpuChange(want, live, maximum)
	if err != nil || !change {
		return false, err
	}
	a.Log.Info("setting vCPUs", "from", live, "to", want)
	t0, from := time.Now(), live
	// One bound for the call and the wait after it, inside virt-handler's
	// 20 s for the RPC.
	wctx, cancel := context.WithTimeout(ctx, a.detachWait())
	defer cancel()
	setErr := a.Client.SetVCPUs(wctx, want)
	if setErr != nil && want > live {
		return false, fmt.Errorf("update vCPUs from %d to %d: %w", live, want, setErr)
	}
	// A removal libvirt gave up waiting for (5 s) may still complete: the
	// guest is asked and lets go when it gets to it. Wait for it as for a
	// detached disk.
	done, err := bounded.PollUntil(wctx, func() (bool, error) {
		live, err = a.Client.VCPUs(ctx, false)
		return live == want, err
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("update vCPUs: %w", err)
	case !done && setErr != nil:
		return false, fmt.Errorf("update vCPUs from %d to %d: %w", from, want, setErr)
	case !done:
		return false, fmt.Errorf("update vCPUs: %d asked, the domain has %d", want, live)
	}
	a.Log.Info("vCPUs set", "from", from, "to", want, "took", time.Since(t0).String())
	return true, nil
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

// VirtioMemHotplugQemu is the first QEMU version (libvirt's encoding) a
// virtio-mem device is hotplugged into.
const VirtioMemHotplugQemu = 8_000_000

// SetMemory is SyncVirtualMachineMemory. As KubeVirt's launcher
// (manager.go UpdateGuestMemory, liveupdate/memory BuildMemoryDevice), the
// memory above the boot size is a virtio-mem device of maxGuest − boot
// size whose requested size is guest − boot size: attached (live and
// config) the first time, its requested size updated (live) after that,
// and read back. On a QEMU older than VirtioMemHotplugQemu the device was
// defined with the domain, empty, and is only updated.
func (a *Applier) SetMemory(ctx context.Context, v *v1.VirtualMachineInstance) (changed bool, err error) {
	live, err := a.Client.XML(ctx, false)
	if err != nil {
		return false, fmt.Errorf("update guest memory: %w", err)
	}
	dev, attach, err := memoryChange(v, live)
	if err != nil || dev == nil {
		return false, err
	}
	x, err := dev.Marshal()
	if err != nil {
		return false, fmt.Errorf("update guest memory: %w", err)
	}
	want := dev.Target.Requested.Value
	if attach {
		ver, err := a.Client.HypervisorVersion(ctx)
		if err != nil {
			return false, fmt.Errorf("update guest memory: %w", err)
		}
		if ver < VirtioMemHotplugQemu {
			// Seen here: QEMU 7.2 (Debian 12) dies in malloc on the
			// device_add of a virtio-mem device, taking the guest with
			// it. A domain this launcher defined on such a QEMU has the
			// device from the start (facts.VirtioMemAtDefine); one
			// without it keeps the memory it has.
			return false, fmt.Errorf("update guest memory: the domain has no virtio-mem device, and attaching one crashes %s (the guest would die): the VM keeps its memory until it restarts", FormatQemuVersion(ver))
		}
	}
	a.Log.Info("setting hotplugged memory", "requestedKiB", want, "attach", attach)
	if attach {
		err = a.Client.Attach(ctx, "attach the virtio-mem device", x, LiveAndConfig)
	} else {
		err = a.Client.Update(ctx, "update the virtio-mem device", x, Live)
	}
	if err != nil {
		return false, fmt.Errorf("update guest memory to %d KiB above the boot size: %w", want, err)
	}
	if live, err = a.Client.XML(ctx, false); err != nil {
		return false, fmt.Errorf("update guest memory: %w", err)
	}
	got, ok := virtioMem(live)
	if !ok || got.Target == nil || got.Target.Requested == nil {
		return false, fmt.Errorf("update guest memory: the domain has no virtio-mem device after the change")
	}
	if b, err := kib(got.Target.Requested.Value, got.Target.Requested.Unit); err != nil || b != uint64(want) {
		return false, fmt.Errorf("update guest memory: %d KiB asked above the boot size, libvirt reports %d %s", want, got.Target.Requested.Value, got.Target.Requested.Unit)
	}
	return true, nil
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

// AttachHostdevs attaches host devices (the SR-IOV interfaces'
// functions of HotplugHostDevices), live and in the definition, in order,
// and stops at the first failure.
func (a *Applier) AttachHostdevs(ctx context.Context, hds []libvirtxml.DomainHostdev) (changed bool, err error) {
	for _, hd := range hds {
		x, err := hd.Marshal()
		if err != nil {
			return false, fmt.Errorf("hot-plug host devices: %s: %w", hd.Alias.Name, err)
		}
		if err := a.Client.Attach(ctx, "attach the host device", x, LiveAndConfig); err != nil {
			return false, fmt.Errorf("hot-plug host devices: %s: %w", hd.Alias.Name, err)
		}
		a.Log.Info("hot-plugged host device", "alias", hd.Alias.Name)
	}
	return len(hds) > 0, nil
}

// HypervisorVersion is QEMU's version in libvirt's encoding
// (major × 1,000,000 + minor × 1,000 + micro).
func HypervisorVersion(ctx context.Context, l *libvirt.Libvirt) (uint64, error) {
	var v uint64
	err := bounded.Call(ctx, "hypervisor version", func() (err error) {
		v, err = l.ConnectGetVersion()
		return err
	})
	return v, err
}

// FormatQemuVersion is the hypervisor version as KubeVirt's launcher
// words it (cli.LibvirtConnection.GetQemuVersion): "QEMU 7.2.22" for
// libvirt's 7002022.
func FormatQemuVersion(v uint64) string {
	return fmt.Sprintf("QEMU %d.%d.%d", v/1000000, v/1000%1000, v%1000)
}
