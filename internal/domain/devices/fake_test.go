package devices

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// fakeClient is an in-memory domain for the appliers: the running domain
// (live) and its definition (def), changed by the device calls as libvirt
// changes them, with the faults the appliers must handle.
type fakeClient struct {
	live, def *libvirtxml.Domain
	// calls logs each call, "<call> <scope> <alias>" ("detach live ua-hp").
	calls []string

	// held are the aliases the guest does not let go of: a live detach
	// is accepted and the device stays.
	held map[string]bool
	// refuse fails the next call of kind ("attach", "detach", "update")
	// on alias with the error, once.
	refuse map[string]error
	// ignoreLive: an alias whose live attach or update libvirt accepts
	// without the running domain showing it.
	ignoreLive map[string]bool
	// sizes are the disks' capacity and physical size by target.
	sizes map[string][2]uint64
	// vcpus and maxVCPUs are the running domain's vCPU count and its
	// maximum; vcpusHeld: the guest does not let go of a vCPU, a removal
	// is accepted and the count stays.
	vcpus, maxVCPUs uint64
	vcpusHeld       bool
	// version is QEMU's (libvirt's encoding).
	version uint64
}

func newFakeClient(live []libvirtxml.DomainDisk, ifaces []libvirtxml.DomainInterface) *fakeClient {
	dom := func() *libvirtxml.Domain {
		return &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{
			Disks: slices.Clone(live), Interfaces: slices.Clone(ifaces)}}
	}
	return &fakeClient{live: dom(), def: dom(), held: map[string]bool{}, refuse: map[string]error{},
		ignoreLive: map[string]bool{}, sizes: map[string][2]uint64{}}
}

func (f *fakeClient) XML(ctx context.Context, inactive bool) (*libvirtxml.Domain, error) {
	dom := f.live
	if inactive {
		dom = f.def
	}
	// A copy through XML, as libvirt gives one.
	x, err := dom.Marshal()
	if err != nil {
		return nil, err
	}
	var out libvirtxml.Domain
	if err := out.Unmarshal(x); err != nil {
		return nil, err
	}
	if out.Devices == nil {
		out.Devices = &libvirtxml.DomainDeviceList{}
	}
	return &out, nil
}

// fakeDevice is one device of a call: a disk, an interface, a host
// device or a memory device, and its alias.
type fakeDevice struct {
	disk    *libvirtxml.DomainDisk
	iface   *libvirtxml.DomainInterface
	hostdev *libvirtxml.DomainHostdev
	mem     *libvirtxml.DomainMemorydev
	alias   string
}

// device parses a device's XML.
func device(x string) (dev fakeDevice, err error) {
	switch {
	case strings.HasPrefix(x, "<disk"):
		dev.disk = &libvirtxml.DomainDisk{}
		err = dev.disk.Unmarshal(x)
		dev.alias = aliasOf(dev.disk.Alias)
	case strings.HasPrefix(x, "<interface"):
		dev.iface = &libvirtxml.DomainInterface{}
		err = dev.iface.Unmarshal(x)
		dev.alias = aliasOf(dev.iface.Alias)
	case strings.HasPrefix(x, "<hostdev"):
		dev.hostdev = &libvirtxml.DomainHostdev{}
		err = dev.hostdev.Unmarshal(x)
		dev.alias = aliasOf(dev.hostdev.Alias)
	case strings.HasPrefix(x, "<memory"):
		dev.mem = &libvirtxml.DomainMemorydev{}
		err = dev.mem.Unmarshal(x)
		// libvirt names the one it attaches.
		dev.alias = aliasOf(dev.mem.Alias)
		if dev.alias == "" {
			dev.alias = "virtiomem0"
			dev.mem.Alias = &libvirtxml.DomainAlias{Name: dev.alias}
		}
	default:
		err = fmt.Errorf("fake: not a disk, an interface, a host device or a memory device: %.40s", x)
	}
	return dev, err
}

func scopeWord(s Scope) string {
	switch s {
	case Live:
		return "live"
	case Config:
		return "config"
	case LiveAndConfig:
		return "live+config"
	}
	return fmt.Sprintf("scope(%d)", s)
}

// doms are the domains scope changes.
func (f *fakeClient) doms(s Scope, alias string, live bool) []*libvirtxml.Domain {
	var out []*libvirtxml.Domain
	if s&Live != 0 && live && !f.ignoreLive[alias] {
		out = append(out, f.live)
	}
	if s&Config != 0 {
		out = append(out, f.def)
	}
	return out
}

func (f *fakeClient) call(ctx context.Context, kind, what, x string, s Scope, change func(dom *libvirtxml.Domain, dev fakeDevice) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	dev, err := device(x)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	f.calls = append(f.calls, kind+" "+scopeWord(s)+" "+dev.alias)
	if err := f.refuse[kind+" "+dev.alias]; err != nil {
		delete(f.refuse, kind+" "+dev.alias)
		return fmt.Errorf("%s: %w", what, err)
	}
	// Each domain is checked before any changes, as libvirt refuses the
	// whole call.
	for _, dom := range f.doms(s, dev.alias, kind != "detach" || !f.held[dev.alias]) {
		if err := change(dom, dev); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

func aliasOf(a *libvirtxml.DomainAlias) string {
	if a == nil {
		return ""
	}
	return a.Name
}

func (f *fakeClient) Attach(ctx context.Context, what, x string, s Scope) error {
	return f.call(ctx, "attach", what, x, s, func(dom *libvirtxml.Domain, dev fakeDevice) error {
		switch {
		case dev.disk != nil:
			if slices.ContainsFunc(dom.Devices.Disks, func(d libvirtxml.DomainDisk) bool { return aliasOf(d.Alias) == dev.alias }) {
				return fmt.Errorf("operation failed: target %s already exists", dev.disk.Target.Dev)
			}
			dom.Devices.Disks = append(dom.Devices.Disks, *dev.disk)
		case dev.iface != nil:
			dom.Devices.Interfaces = append(dom.Devices.Interfaces, *dev.iface)
		case dev.hostdev != nil:
			dom.Devices.Hostdevs = append(dom.Devices.Hostdevs, *dev.hostdev)
		default:
			dom.Devices.Memorydevs = append(dom.Devices.Memorydevs, *dev.mem)
		}
		return nil
	})
}

func (f *fakeClient) Detach(ctx context.Context, what, x string, s Scope) error {
	return f.call(ctx, "detach", what, x, s, func(dom *libvirtxml.Domain, dev fakeDevice) error {
		alias := dev.alias
		n := len(dom.Devices.Disks) + len(dom.Devices.Interfaces)
		dom.Devices.Disks = slices.DeleteFunc(dom.Devices.Disks, func(d libvirtxml.DomainDisk) bool { return aliasOf(d.Alias) == alias })
		dom.Devices.Interfaces = slices.DeleteFunc(dom.Devices.Interfaces, func(i libvirtxml.DomainInterface) bool { return aliasOf(i.Alias) == alias })
		if n == len(dom.Devices.Disks)+len(dom.Devices.Interfaces) {
			return fmt.Errorf("operation failed: device %s not found", alias)
		}
		return nil
	})
}

func (f *fakeClient) Update(ctx context.Context, what, x string, s Scope) error {
	return f.call(ctx, "update", what, x, s, func(dom *libvirtxml.Domain, dev fakeDevice) error {
		for i := range dom.Devices.Disks {
			if dev.disk != nil && aliasOf(dom.Devices.Disks[i].Alias) == dev.alias {
				dom.Devices.Disks[i] = *dev.disk
				return nil
			}
		}
		for i := range dom.Devices.Interfaces {
			if dev.iface != nil && aliasOf(dom.Devices.Interfaces[i].Alias) == dev.alias {
				dom.Devices.Interfaces[i] = *dev.iface
				return nil
			}
		}
		for i := range dom.Devices.Memorydevs {
			if dev.mem != nil && aliasOf(dom.Devices.Memorydevs[i].Alias) == dev.alias {
				dom.Devices.Memorydevs[i] = *dev.mem
				return nil
			}
		}
		return fmt.Errorf("operation failed: device %s not found", dev.alias)
	})
}

func (f *fakeClient) Monitor(ctx context.Context, what, cmd string) (string, error) {
	f.calls = append(f.calls, "monitor "+cmd)
	return "", fmt.Errorf("%s: %w", what, errors.New("fake: no monitor"))
}

func (f *fakeClient) BlockInfo(ctx context.Context, target string) (alloc, capacity, physical uint64, err error) {
	s, ok := f.sizes[target]
	if !ok {
		return 0, 0, 0, fmt.Errorf("read the disk's size: fake: no disk %s", target)
	}
	return s[1], s[0], s[1], nil
}

func (f *fakeClient) BlockResize(ctx context.Context, target string, size uint64) error {
	f.calls = append(f.calls, fmt.Sprintf("resize %s %d", target, size))
	s := f.sizes[target]
	f.sizes[target] = [2]uint64{size, max(s[1], size)}
	return nil
}

// aliases are the user aliases of dom's disks and interfaces, in order.
func aliases(dom *libvirtxml.Domain) []string {
	var out []string
	for _, d := range dom.Devices.Disks {
		out = append(out, aliasOf(d.Alias))
	}
	for _, i := range dom.Devices.Interfaces {
		out = append(out, aliasOf(i.Alias))
	}
	return out
}

// fakeNetwork is the network phase: the interfaces served, and the
// interfaces it converts (one bridge <interface> per VMI interface).
type fakeNetwork struct {
	served []string
	// serveErr fails Serve.
	serveErr error
}

func (n *fakeNetwork) Serve(ctx context.Context, v *v1.VirtualMachineInstance, name string) error {
	if n.serveErr != nil {
		return n.serveErr
	}
	n.served = append(n.served, name)
	return nil
}

func (n *fakeNetwork) Interfaces(v *v1.VirtualMachineInstance) ([]libvirtxml.DomainInterface, error) {
	var out []libvirtxml.DomainInterface
	for _, i := range v.Spec.Domain.Devices.Interfaces {
		if slices.Contains(n.served, i.Name) {
			out = append(out, libvirtxml.DomainInterface{Alias: &libvirtxml.DomainAlias{Name: "ua-" + i.Name},
				Target: &libvirtxml.DomainInterfaceTarget{Dev: "tap" + i.Name},
				Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}}})
		}
	}
	return out, nil
}

func (n *fakeNetwork) Stop(name string) error {
	n.served = slices.DeleteFunc(n.served, func(s string) bool { return s == name })
	return nil
}

func (f *fakeClient) VCPUs(ctx context.Context, maximum bool) (uint64, error) {
	if maximum {
		return f.maxVCPUs, nil
	}
	return f.vcpus, nil
}

func (f *fakeClient) SetVCPUs(ctx context.Context, n uint64) error {
	f.calls = append(f.calls, fmt.Sprintf("set vCPUs %d", n))
	if err := f.refuse["set vCPUs"]; err != nil {
		delete(f.refuse, "set vCPUs")
		return fmt.Errorf("set the vCPUs: %w", err)
	}
	if n > f.maxVCPUs {
		return fmt.Errorf("set the vCPUs: invalid argument: requested vcpus is greater than max allowable vcpus for the live domain: %d > %d", n, f.maxVCPUs)
	}
	if n < f.vcpus && f.vcpusHeld {
		return nil
	}
	f.vcpus = n
	return nil
}

func (f *fakeClient) HypervisorVersion(ctx context.Context) (uint64, error) { return f.version, nil }
