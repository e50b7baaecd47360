package hostdev

import (
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// The prefixes of the variables KubeVirt's device plugins put in the
// launcher's environment: host PCI addresses for PCI passthrough,
// mediated device UUIDs, USB bus:device numbers.
const (
	PCIPrefix  = "PCI_RESOURCE"
	MDevPrefix = "MDEV_PCI_RESOURCE"
	USBPrefix  = "USB_RESOURCE"
)

// Prefixes are the three, for whoever copies them out of an environment.
var Prefixes = []string{PCIPrefix, MDevPrefix, USBPrefix}

// EnvVar is the variable a device plugin sets for a resource: the prefix,
// '_', and the resource name upper-cased with '/' and '.' made '_'
// (nvidia.com/GP102GL → PCI_RESOURCE_NVIDIA_COM_GP102GL).
func EnvVar(prefix, resource string) string {
	r := strings.NewReplacer("/", "_", ".", "_").Replace(strings.ToUpper(resource))
	return prefix + "_" + r
}

// pool hands out the addresses the device plugins gave a set of resources,
// one prefix's worth, as KubeVirt's launcher does: each variable's list in
// order (a trailing comma ignored), and an address handed out once is
// taken off every resource's list.
type pool struct {
	prefix string
	addrs  map[string][]string // by resource; absent when the variable is unset
	given  map[string]int      // addresses handed out, by resource
}

func newPool(env map[string]string, prefix string, resources []string) *pool {
	p := &pool{prefix: prefix, addrs: map[string][]string{}, given: map[string]int{}}
	for _, r := range resources {
		val, ok := env[EnvVar(prefix, r)]
		if !ok {
			continue
		}
		val = strings.TrimSuffix(val, ",")
		var list []string
		if val != "" {
			list = strings.Split(val, ",")
		}
		p.addrs[r] = list
	}
	return p
}

// pop returns the next address of resource; false when its variable is
// unset or its list is used up.
func (p *pool) pop(resource string) (string, bool) {
	list := p.addrs[resource]
	if len(list) == 0 {
		return "", false
	}
	addr := list[0]
	for r, l := range p.addrs {
		var rest []string
		for _, a := range l {
			if a != addr {
				rest = append(rest, a)
			}
		}
		p.addrs[r] = rest
	}
	p.given[resource]++
	return addr, true
}

// describe says what the variable of resource held, for an error about a
// device that got nothing from it.
func (p *pool) describe(env map[string]string, resource string) string {
	name := EnvVar(p.prefix, resource)
	val, ok := env[name]
	switch {
	case !ok:
		return name + " is unset"
	case strings.TrimSuffix(val, ",") == "":
		return name + " is empty"
	default:
		return fmt.Sprintf("%s=%q was used up by %d device(s) before it", name, val, p.given[resource])
	}
}

// AddPCI gives the GPU, host device or SR-IOV interface of the VMI named
// name the host PCI device addr, as its device plugin (or Multus) would
// have: the address is appended to the PCI_RESOURCE variable of the
// device's resource, or becomes the network's address. It is how a
// launcher outside a cluster (vlctl) is told about devices.
func AddPCI(vmi *v1.VirtualMachineInstance, d *facts.Devices, name, addr string) error {
	if _, err := pciAddress(addr); err != nil {
		return err
	}
	resource, found := "", false
	for _, g := range vmi.Spec.Domain.Devices.GPUs {
		if g.Name == name && !isDRA(g.DeviceName, g.ClaimRequest) {
			resource, found = g.DeviceName, true
		}
	}
	for _, h := range vmi.Spec.Domain.Devices.HostDevices {
		if h.Name == name && !isDRA(h.DeviceName, h.ClaimRequest) {
			resource, found = h.DeviceName, true
		}
	}
	if found {
		if d.Env == nil {
			d.Env = map[string]string{}
		}
		v := EnvVar(PCIPrefix, resource)
		if d.Env[v] != "" {
			addr = d.Env[v] + "," + addr
		}
		d.Env[v] = addr
		return nil
	}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Name == name && iface.SRIOV != nil {
			if d.NetworkPCI == nil {
				d.NetworkPCI = map[string]string{}
			}
			d.NetworkPCI[name] = addr
			return nil
		}
	}
	return fmt.Errorf("the VMI has no GPU, host device (served by a device plugin) or SR-IOV interface named %q", name)
}
