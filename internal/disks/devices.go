package disks

import (
	"encoding/json"
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// DeviceData is one entry of the ConfigDrive meta-data's "devices" list
// (OpenStack's device role tagging), in KubeVirt's JSON shape: a tagged
// device and the guest address the domain gave it.
type DeviceData struct {
	Type        string   `json:"type"` // "nic" or "hostdev"
	Bus         string   `json:"bus"`
	Address     string   `json:"address"`
	MAC         string   `json:"mac,omitempty"`
	Serial      string   `json:"serial,omitempty"`
	NumaNode    uint32   `json:"numaNode,omitempty"`
	AlignedCPUs []uint32 `json:"alignedCPUs,omitempty"`
	Tags        []string `json:"tags"`
}

// Alias prefixes of the <hostdev> elements (after "ua-"), as the converter
// names them.
const (
	sriovAliasPrefix   = "sriov-"
	hostdevAliasPrefix = "hostdevice-"
	gpuAliasPrefix     = "gpu-"
)

// ConfigDriveDevices rewrites the ConfigDrive ISO the last Prepare made with
// the device metadata of vmi's tagged interfaces and host devices, at the
// addresses of the defined domain (which libvirt assigns at the define, so
// this runs between the define and the start, as in KubeVirt). defined is
// called only when there is something to write: a ConfigDrive volume and a
// tag.
func (p *Preparer) ConfigDriveDevices(vmi *v1.VirtualMachineInstance, defined func() (*libvirtxml.Domain, error)) error {
	p.mu.Lock()
	data := p.configDrive
	p.mu.Unlock()
	if data == nil || !hasDeviceTags(vmi) {
		return nil
	}
	dom, err := defined()
	if err != nil {
		return fmt.Errorf("device metadata: %w", err)
	}
	devs := DevicesMetadata(vmi, dom)
	if devs == nil {
		return nil
	}
	raw, err := json.Marshal(devs)
	if err != nil {
		return err
	}
	c := *data
	c.DevicesData = raw
	if err := p.writeCloudInit(vmi, &c); err != nil {
		return fmt.Errorf("device metadata: %w", err)
	}
	return nil
}

func hasDeviceTags(vmi *v1.VirtualMachineInstance) bool {
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		if i.Tag != "" {
			return true
		}
	}
	for _, h := range vmi.Spec.Domain.Devices.HostDevices {
		if h.Tag != "" {
			return true
		}
	}
	return false
}

// DevicesMetadata lists the tagged devices of vmi found in dom, as KubeVirt
// v1.9.0's launcher does: interfaces (type nic, with their MAC), SR-IOV
// interfaces (nic, without a MAC) and host devices (hostdev), in the
// domain's order. Disk tags are not listed, and a GPU is looked up among
// the tagged host devices by its name, not by its own tag: KubeVirt does
// both so. A device without a PCI address is skipped.
func DevicesMetadata(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) []DeviceData {
	ifaceTags, hostdevTags := map[string]string{}, map[string]string{}
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		if i.Tag != "" {
			ifaceTags[i.Name] = i.Tag
		}
	}
	for _, h := range vmi.Spec.Domain.Devices.HostDevices {
		if h.Tag != "" {
			hostdevTags[h.Name] = h.Tag
		}
	}
	if dom == nil || dom.Devices == nil {
		return nil
	}
	var out []DeviceData
	add := func(kind string, a *libvirtxml.DomainAddress, mac, tag string) {
		if a == nil || a.PCI == nil || a.PCI.Domain == nil || a.PCI.Bus == nil || a.PCI.Slot == nil || a.PCI.Function == nil {
			return
		}
		out = append(out, DeviceData{
			Type: kind, Bus: "pci", MAC: mac, Tags: []string{tag},
			Address: fmt.Sprintf("%04x:%02x:%02x.%x", *a.PCI.Domain, *a.PCI.Bus, *a.PCI.Slot, *a.PCI.Function),
		})
	}
	for _, nic := range dom.Devices.Interfaces {
		if tag, ok := ifaceTags[userAlias(nic.Alias)]; ok {
			mac := ""
			if nic.MAC != nil {
				mac = nic.MAC.Address
			}
			add("nic", nic.Address, mac, tag)
		}
	}
	for _, h := range dom.Devices.Hostdevs {
		name := userAlias(h.Alias)
		if tag, ok := ifaceTags[strings.TrimPrefix(name, sriovAliasPrefix)]; ok {
			add("nic", h.Address, "", tag)
		}
		if tag, ok := hostdevTags[strings.TrimPrefix(name, hostdevAliasPrefix)]; ok {
			add("hostdev", h.Address, "", tag)
		}
		if tag, ok := hostdevTags[strings.TrimPrefix(name, gpuAliasPrefix)]; ok {
			add("hostdev", h.Address, "", tag)
		}
	}
	return out
}

// userAlias is the name behind a "ua-" alias, "" for none.
func userAlias(a *libvirtxml.DomainAlias) string {
	if a == nil {
		return ""
	}
	return strings.TrimPrefix(a.Name, "ua-")
}
