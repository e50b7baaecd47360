// Package hostdev converts the devices passed through from the host (host
// devices, GPUs and SR-IOV interfaces) into <hostdev> elements, as KubeVirt
// v1.9.0's launcher does (kubevirt-conversion.md B.12). The converter
// cannot discover devices: the Context carries what the pod was given (the
// device plugins' environment, the network-info file, the DRA drivers'
// metadata), and this package hands those out to the VMI's devices.
package hostdev

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// The aliases KubeVirt gives each kind of host device, after "ua-".
const (
	aliasHostDevice    = "hostdevice-"
	aliasGPU           = "gpu-"
	aliasUSB           = "usb-host-"
	aliasDRAHostDevice = "dra-hostdevice-"
	aliasDRAGPU        = "dra-gpu-"
	// SRIOVAlias is the alias prefix of an SR-IOV interface's host device
	// (KubeVirt's deviceinfo.SRIOVAliasPrefix).
	SRIOVAlias = "sriov-"
)

type configurator struct{ ctx *facts.Context }

// New returns the host device configurator.
func New(c *facts.Context) facts.Configurator { return configurator{ctx: c} }

// Configure appends, in KubeVirt's order, the host devices (device
// plugins' PCI, mediated and USB devices, then DRA's), the GPUs (PCI,
// mediated, then DRA's) and the SR-IOV interfaces (Multus's, then DRA's).
func (h configurator) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	d := &h.ctx.Devices
	var all []libvirtxml.DomainHostdev
	for _, step := range []func(*v1.VirtualMachineInstance, *facts.Devices) ([]libvirtxml.DomainHostdev, error){
		hostDevices, draHostDevices, gpus, draGPUs, SRIOV, draSRIOV,
	} {
		hds, err := step(vmi, d)
		if err != nil {
			return err
		}
		all = append(all, hds...)
	}
	if err := distinct(all); err != nil {
		return err
	}
	dom.Devices.Hostdevs = append(dom.Devices.Hostdevs, all...)
	return nil
}

// device is one GPU or host device of the VMI that a device plugin serves.
type device struct {
	field    string // its path in the VMI, for errors
	kind     string // "GPU" or "host device"
	name     string
	resource string
	alias    string
	vgpu     *v1.VGPUOptions
}

func hostDevices(vmi *v1.VirtualMachineInstance, d *facts.Devices) ([]libvirtxml.DomainHostdev, error) {
	var devs []device
	for i, hd := range vmi.Spec.Domain.Devices.HostDevices {
		if isDRA(hd.DeviceName, hd.ClaimRequest) {
			continue
		}
		devs = append(devs, device{field: fmt.Sprintf("spec.domain.devices.hostDevices[%d]", i), kind: "host device",
			name: hd.Name, resource: hd.DeviceName, alias: aliasHostDevice})
	}
	return fromPlugins(d.Env, devs, true, false)
}

func gpus(vmi *v1.VirtualMachineInstance, d *facts.Devices) ([]libvirtxml.DomainHostdev, error) {
	var devs []device
	for i, g := range vmi.Spec.Domain.Devices.GPUs {
		if isDRA(g.DeviceName, g.ClaimRequest) {
			continue
		}
		devs = append(devs, device{field: fmt.Sprintf("spec.domain.devices.gpus[%d]", i), kind: "GPU",
			name: g.Name, resource: g.DeviceName, alias: aliasGPU, vgpu: g.VirtualGPUOptions})
	}
	return fromPlugins(d.Env, devs, false, true)
}

// isDRA says whether a GPU or host device is allocated by DRA rather than
// a device plugin: KubeVirt's rule is a claim request and no device name.
func isDRA(deviceName string, cr *v1.ClaimRequest) bool { return deviceName == "" && cr != nil }

// fromPlugins hands the device plugins' addresses out to devs as KubeVirt
// does: every device first asks the PCI pool, then every device the
// mediated pool, then (host devices only) the USB pool; a device whose
// resource has no address left in a pool is passed over by it. Each kind
// of device has pools of its own. withDisplay gives the first mediated
// device a display and ramfb when no device sets display options (GPUs).
// Every device must end with exactly one element.
func fromPlugins(env map[string]string, devs []device, withUSB, withDisplay bool) ([]libvirtxml.DomainHostdev, error) {
	if len(devs) == 0 {
		return nil, nil
	}
	var resources []string
	for _, d := range devs {
		if d.name == "" {
			return nil, fmt.Errorf("%s.name: must not be empty", d.field)
		}
		if !slices.Contains(resources, d.resource) {
			resources = append(resources, d.resource)
		}
	}
	pools := []*pool{newPool(env, PCIPrefix, resources), newPool(env, MDevPrefix, resources)}
	if withUSB {
		pools = append(pools, newPool(env, USBPrefix, resources))
	}
	got := make([]int, len(devs))
	var out []libvirtxml.DomainHostdev
	for _, p := range pools {
		var made []libvirtxml.DomainHostdev
		for i, d := range devs {
			addr, ok := p.pop(d.resource)
			if !ok {
				continue
			}
			hd, err := fromPlugin(p.prefix, d, addr, withDisplay)
			if err != nil {
				return nil, err
			}
			made = append(made, hd)
			got[i]++
		}
		if p.prefix == MDevPrefix && withDisplay && len(made) > 0 && !slices.ContainsFunc(devs, displaySet) {
			made[0].SubsysMDev.Display, made[0].SubsysMDev.RamFB = "on", "on"
		}
		out = append(out, made...)
	}
	for i, d := range devs {
		switch {
		case got[i] == 0:
			var why []string
			for _, p := range pools {
				why = append(why, p.describe(env, d.resource))
			}
			return nil, fmt.Errorf("%s: no device for %s %q of resource %q: %s (a device plugin sets these in the launcher's environment; vlctl run takes --device NAME=DDDD:BB:SS.F, vlctl convert --pci-address)",
				d.field, d.kind, d.name, d.resource, strings.Join(why, ", "))
		case got[i] > 1:
			return nil, fmt.Errorf("%s: %s %q of resource %q got %d devices: more than one of %s name it",
				d.field, d.kind, d.name, d.resource, got[i], strings.Join(varNames(pools, d.resource), ", "))
		}
	}
	return out, nil
}

func varNames(pools []*pool, resource string) []string {
	var out []string
	for _, p := range pools {
		out = append(out, EnvVar(p.prefix, resource))
	}
	return out
}

func displaySet(d device) bool { return d.vgpu != nil && d.vgpu.Display != nil }

// fromPlugin is the element for one address of a device plugin's pool.
func fromPlugin(prefix string, d device, addr string, withDisplay bool) (libvirtxml.DomainHostdev, error) {
	switch prefix {
	case PCIPrefix:
		hd, err := pciHostdev(d.alias+d.name, addr)
		if err != nil {
			return hd, fmt.Errorf("%s: %s %q: %s: %w", d.field, d.kind, d.name, EnvVar(prefix, d.resource), err)
		}
		// KubeVirt v1.9.0 shows a display of a PCI device (a vGPU its
		// driver presents as a PCI function) when one is asked for
		// explicitly; libvirt 9.0 knows display and ramfb of mediated
		// devices only, and would drop them without a word.
		if displaySet(d) && on(d.vgpu.Display.Enabled, false) {
			return hd, fmt.Errorf("%s.virtualGPUOptions.display.enabled: %s %q is a PCI device (%s), and libvirt 9.0 shows a display of mediated devices only",
				d.field, d.kind, d.name, EnvVar(prefix, d.resource))
		}
		return hd, nil
	case MDevPrefix:
		hd := mdevHostdev(d.alias+d.name, addr)
		if withDisplay && displaySet(d) && on(d.vgpu.Display.Enabled, true) {
			hd.SubsysMDev.Display = "on"
			if rf := d.vgpu.Display.RamFB; rf == nil || on(rf.Enabled, true) {
				hd.SubsysMDev.RamFB = "on"
			}
		}
		return hd, nil
	default:
		hd, err := usbHostdev(aliasUSB+d.name, addr)
		if err != nil {
			return hd, fmt.Errorf("%s: %s %q: %s: %w", d.field, d.kind, d.name, EnvVar(prefix, d.resource), err)
		}
		return hd, nil
	}
}

// on reads an optional switch, unset meaning def.
func on(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// hostPCIRE is the form KubeVirt accepts for a host PCI address: all four
// parts, as device plugins and DRA drivers write them.
var hostPCIRE = regexp.MustCompile(`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// pciAddress parses a full PCI address (a host's, or a guest address a
// VMI gives).
func pciAddress(s string) (*libvirtxml.DomainAddressPCI, error) {
	if !hostPCIRE.MatchString(s) {
		return nil, fmt.Errorf("%q is not a PCI address like 0000:81:00.1", s)
	}
	return facts.PCIAddress(s)
}

func pciHostdev(alias, addr string) (libvirtxml.DomainHostdev, error) {
	pci, err := pciAddress(addr)
	if err != nil {
		return libvirtxml.DomainHostdev{}, err
	}
	return libvirtxml.DomainHostdev{
		Managed:   "no",
		SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{Source: &libvirtxml.DomainHostdevSubsysPCISource{Address: pci}},
		Alias:     &libvirtxml.DomainAlias{Name: "ua-" + alias},
	}, nil
}

func mdevHostdev(alias, uuid string) libvirtxml.DomainHostdev {
	return libvirtxml.DomainHostdev{
		SubsysMDev: &libvirtxml.DomainHostdevSubsysMDev{Model: "vfio-pci",
			Source: &libvirtxml.DomainHostdevSubsysMDevSource{Address: &libvirtxml.DomainAddressMDev{UUID: uuid}}},
		Alias: &libvirtxml.DomainAlias{Name: "ua-" + alias},
	}
}

// usbHostdev takes the device plugin's "bus:device" (decimal numbers).
func usbHostdev(alias, addr string) (libvirtxml.DomainHostdev, error) {
	busS, devS, ok := strings.Cut(addr, ":")
	bus, err1 := strconv.ParseUint(busS, 10, 16)
	dev, err2 := strconv.ParseUint(devS, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return libvirtxml.DomainHostdev{}, fmt.Errorf("%q is not a USB bus:device like 1:5", addr)
	}
	b, d := uint(bus), uint(dev)
	return libvirtxml.DomainHostdev{
		SubsysUSB: &libvirtxml.DomainHostdevSubsysUSB{Source: &libvirtxml.DomainHostdevSubsysUSBSource{
			Address: &libvirtxml.DomainAddressUSB{Bus: &b, Device: &d}}},
		Alias: &libvirtxml.DomainAlias{Name: "ua-" + alias},
	}, nil
}

// distinct refuses one host device given to two of the VMI's devices (a
// GPU and a host device of one resource draw from pools of their own):
// libvirt would refuse the domain only when it starts.
func distinct(hds []libvirtxml.DomainHostdev) error {
	seen := map[string]string{}
	for _, hd := range hds {
		var key string
		switch {
		case hd.SubsysPCI != nil:
			a := hd.SubsysPCI.Source.Address
			key = fmt.Sprintf("PCI %04x:%02x:%02x.%x", *a.Domain, *a.Bus, *a.Slot, *a.Function)
		case hd.SubsysMDev != nil:
			key = "mediated device " + strings.ToLower(hd.SubsysMDev.Source.Address.UUID)
		case hd.SubsysUSB != nil:
			a := hd.SubsysUSB.Source.Address
			key = fmt.Sprintf("USB %d:%d", *a.Bus, *a.Device)
		}
		name := strings.TrimPrefix(hd.Alias.Name, "ua-")
		if other, dup := seen[key]; dup {
			return fmt.Errorf("host device %s is given to both %s and %s", key, other, name)
		}
		seen[key] = name
	}
	return nil
}
