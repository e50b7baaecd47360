package devices

import (
	"context"
	"fmt"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// Scope is where a device change applies: the running domain, its
// definition, or both.
type Scope uint32

// The scopes, libvirt's device modify flags.
const (
	Live          = Scope(libvirt.DomainDeviceModifyLive)
	Config        = Scope(libvirt.DomainDeviceModifyConfig)
	LiveAndConfig = Live | Config
)

// Client is what the device changes need of one domain. Each call returns
// when the daemon answered or ctx ended (its error then), and its error
// names the call (the appliers add the device).
type Client interface {
	// XML reads the running domain (inactive false) or its definition,
	// with Devices set.
	XML(ctx context.Context, inactive bool) (*libvirtxml.Domain, error)
	// Attach, Detach and Update change a device (its XML) in scope.
	Attach(ctx context.Context, what, xml string, scope Scope) error
	Detach(ctx context.Context, what, xml string, scope Scope) error
	Update(ctx context.Context, what, xml string, scope Scope) error
	// Monitor runs a QMP command in QEMU's monitor: for what a daemon that
	// died left in QEMU without knowing it.
	Monitor(ctx context.Context, what, cmd string) (string, error)
	// BlockInfo is the disk's allocation, capacity (the size the guest
	// sees) and physical size; BlockResize grows the disk to size bytes.
	BlockInfo(ctx context.Context, target string) (alloc, capacity, physical uint64, err error)
	BlockResize(ctx context.Context, target string, size uint64) error
	// VCPUs is the running domain's vCPU count, or (maximum) the most it
	// can have; SetVCPUs sets the count, live and in the definition.
	VCPUs(ctx context.Context, maximum bool) (uint64, error)
	SetVCPUs(ctx context.Context, n uint64) error
	// HypervisorVersion is QEMU's version (HypervisorVersion).
	HypervisorVersion(ctx context.Context) (uint64, error)
}

// Libvirt is the Client of domain D over connection L.
type Libvirt struct {
	L *libvirt.Libvirt
	D libvirt.Domain
}

// XML implements Client.
func (c Libvirt) XML(ctx context.Context, inactive bool) (*libvirtxml.Domain, error) {
	var flags libvirt.DomainXMLFlags
	if inactive {
		flags = libvirt.DomainXMLInactive
	}
	return ReadXML(ctx, c.L, c.D, flags)
}

// ReadXML reads and parses the domain's XML (flags: 0 for the running
// domain, DomainXMLInactive for its definition), with Devices set.
func ReadXML(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain, flags libvirt.DomainXMLFlags) (*libvirtxml.Domain, error) {
	var x string
	if err := bounded.Call(ctx, "read the domain XML", func() (err error) {
		x, err = l.DomainGetXMLDesc(d, flags)
		return err
	}); err != nil {
		return nil, err
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("parse XML of domain %s: %w", d.Name, err)
	}
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	return &dom, nil
}

// Attach implements Client.
func (c Libvirt) Attach(ctx context.Context, what, xml string, scope Scope) error {
	return bounded.Call(ctx, what, func() error { return c.L.DomainAttachDeviceFlags(c.D, xml, uint32(scope)) })
}

// Detach implements Client.
func (c Libvirt) Detach(ctx context.Context, what, xml string, scope Scope) error {
	return bounded.Call(ctx, what, func() error { return c.L.DomainDetachDeviceFlags(c.D, xml, uint32(scope)) })
}

// Update implements Client.
func (c Libvirt) Update(ctx context.Context, what, xml string, scope Scope) error {
	return bounded.Call(ctx, what, func() error {
		return c.L.DomainUpdateDeviceFlags(c.D, xml, libvirt.DomainDeviceModifyFlags(scope))
	})
}

// Monitor implements Client.
func (c Libvirt) Monitor(ctx context.Context, what, cmd string) (string, error) {
	var out string
	err := bounded.Call(ctx, what, func() error {
		var err error
		out, err = c.L.QEMUDomainMonitorCommand(c.D, cmd, 0)
		return err
	})
	return out, err
}

// BlockInfo implements Client.
func (c Libvirt) BlockInfo(ctx context.Context, target string) (alloc, capacity, physical uint64, err error) {
	err = bounded.Call(ctx, "read the disk's size", func() (err error) {
		alloc, capacity, physical, err = c.L.DomainGetBlockInfo(c.D, target, 0)
		return err
	})
	return alloc, capacity, physical, err
}

// BlockResize implements Client.
func (c Libvirt) BlockResize(ctx context.Context, target string, size uint64) error {
	return bounded.Call(ctx, "resize the disk", func() error {
		return c.L.DomainBlockResize(c.D, target, size, libvirt.DomainBlockResizeBytes)
	})
}

// VCPUs implements Client.
func (c Libvirt) VCPUs(ctx context.Context, maximum bool) (uint64, error) {
	flags := libvirt.DomainVCPULive
	if maximum {
		flags |= libvirt.DomainVCPUMaximum
	}
	var n int32
	err := bounded.Call(ctx, "read the vCPU count of domain "+c.D.Name, func() (err error) {
		n, err = c.L.DomainGetVcpusFlags(c.D, uint32(flags))
		return err
	})
	return uint64(max(n, 0)), err
}

// SetVCPUs implements Client.
func (c Libvirt) SetVCPUs(ctx context.Context, n uint64) error {
	flags := libvirt.DomainVCPULive | libvirt.DomainVCPUConfig
	return bounded.Call(ctx, "set the vCPUs", func() error { return c.L.DomainSetVcpusFlags(c.D, uint32(n), uint32(flags)) })
}

// HypervisorVersion implements Client.
func (c Libvirt) HypervisorVersion(ctx context.Context) (uint64, error) {
	return HypervisorVersion(ctx, c.L)
}
