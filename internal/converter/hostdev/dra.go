package hostdev

import (
	"fmt"
	"slices"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// ClaimRequests lists every claim request the VMI's DRA devices name (GPUs
// and host devices without a device name, SR-IOV interfaces on resource
// claim networks), for the launcher to read their metadata.
func ClaimRequests(vmi *v1.VirtualMachineInstance) []facts.DRARequest {
	var out []facts.DRARequest
	add := func(cr *v1.ClaimRequest) {
		if cr == nil || cr.ClaimName == "" || cr.RequestName == "" {
			return
		}
		r := facts.DRARequest{Claim: cr.ClaimName, Request: cr.RequestName}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, g := range vmi.Spec.Domain.Devices.GPUs {
		if isDRA(g.DeviceName, g.ClaimRequest) {
			add(g.ClaimRequest)
		}
	}
	for _, hd := range vmi.Spec.Domain.Devices.HostDevices {
		if isDRA(hd.DeviceName, hd.ClaimRequest) {
			add(hd.ClaimRequest)
		}
	}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if n := draNetwork(vmi, iface); iface.SRIOV != nil && n != nil {
			add(n)
		}
	}
	return out
}

// draNetwork is the claim request of the network an interface is on, nil
// when it is not a resource claim network.
func draNetwork(vmi *v1.VirtualMachineInstance, iface v1.Interface) *v1.ClaimRequest {
	for _, n := range vmi.Spec.Networks {
		if n.Name == iface.Name {
			return n.ResourceClaim
		}
	}
	return nil
}

// draDevice is the device a DRA driver gave one claim request.
func draDevice(d *facts.Devices, field, kind, name string, cr *v1.ClaimRequest) (facts.DRADevice, error) {
	if cr == nil || cr.ClaimName == "" || cr.RequestName == "" {
		return facts.DRADevice{}, fmt.Errorf("%s: %s %q has an incomplete claim request (claimName and requestName are both needed)", field, kind, name)
	}
	dev, ok := d.DRA[facts.DRARequest{Claim: cr.ClaimName, Request: cr.RequestName}]
	switch {
	case !ok:
		return dev, fmt.Errorf("%s: %s %q: no DRA metadata read for claim %q request %q", field, kind, name, cr.ClaimName, cr.RequestName)
	case dev.MDevUUID == "" && dev.PCIBusID == "":
		why := "it names neither mdevUUID nor resource.kubernetes.io/pciBusID"
		if dev.Err != "" {
			why = dev.Err
		}
		return dev, fmt.Errorf("%s: %s %q: DRA metadata of claim %q request %q: %s", field, kind, name, cr.ClaimName, cr.RequestName, why)
	}
	return dev, nil
}

// draGPUs: a mediated device when the driver names one (a vGPU whose
// parent also has a PCI address is still a vGPU), with the GPU's display
// options, and the first a display and ramfb when no GPU of the VMI sets
// display options; else the PCI device, without a display.
func draGPUs(vmi *v1.VirtualMachineInstance, d *facts.Devices) ([]libvirtxml.DomainHostdev, error) {
	var out []libvirtxml.DomainHostdev
	gpus := vmi.Spec.Domain.Devices.GPUs
	for i, g := range gpus {
		if !isDRA(g.DeviceName, g.ClaimRequest) {
			continue
		}
		field := fmt.Sprintf("spec.domain.devices.gpus[%d]", i)
		dev, err := draDevice(d, field, "GPU", g.Name, g.ClaimRequest)
		if err != nil {
			return nil, err
		}
		if dev.MDevUUID != "" {
			hd := mdevHostdev(aliasDRAGPU+g.Name, dev.MDevUUID)
			if o := g.VirtualGPUOptions; o != nil && o.Display != nil && on(o.Display.Enabled, true) {
				hd.SubsysMDev.Display = "on"
				if rf := o.Display.RamFB; rf == nil || on(rf.Enabled, true) {
					hd.SubsysMDev.RamFB = "on"
				}
			}
			out = append(out, hd)
			continue
		}
		hd, err := pciHostdev(aliasDRAGPU+g.Name, dev.PCIBusID)
		if err != nil {
			return nil, fmt.Errorf("%s: GPU %q: DRA pciBusID: %w", field, g.Name, err)
		}
		out = append(out, hd)
	}
	if !slices.ContainsFunc(gpus, func(g v1.GPU) bool { return g.VirtualGPUOptions != nil && g.VirtualGPUOptions.Display != nil }) {
		for i := range out {
			if out[i].SubsysMDev != nil {
				out[i].SubsysMDev.Display, out[i].SubsysMDev.RamFB = "on", "on"
				break
			}
		}
	}
	return out, nil
}

// draHostDevices: a mediated device (model vfio-ap on s390x, where they
// are crypto adapters) or a PCI device, never a display.
func draHostDevices(vmi *v1.VirtualMachineInstance, d *facts.Devices) ([]libvirtxml.DomainHostdev, error) {
	var out []libvirtxml.DomainHostdev
	for i, h := range vmi.Spec.Domain.Devices.HostDevices {
		if !isDRA(h.DeviceName, h.ClaimRequest) {
			continue
		}
		field := fmt.Sprintf("spec.domain.devices.hostDevices[%d]", i)
		dev, err := draDevice(d, field, "host device", h.Name, h.ClaimRequest)
		if err != nil {
			return nil, err
		}
		if dev.MDevUUID != "" {
			hd := mdevHostdev(aliasDRAHostDevice+h.Name, dev.MDevUUID)
			if vmi.Spec.Architecture == "s390x" {
				hd.SubsysMDev.Model = "vfio-ap"
			}
			out = append(out, hd)
			continue
		}
		hd, err := pciHostdev(aliasDRAHostDevice+h.Name, dev.PCIBusID)
		if err != nil {
			return nil, fmt.Errorf("%s: host device %q: DRA pciBusID: %w", field, h.Name, err)
		}
		out = append(out, hd)
	}
	return out, nil
}

// draSRIOV: the SR-IOV interfaces on resource claim networks, their
// virtual function from the claim's pciBusID, otherwise as Multus's.
func draSRIOV(vmi *v1.VirtualMachineInstance, d *facts.Devices) ([]libvirtxml.DomainHostdev, error) {
	var out []libvirtxml.DomainHostdev
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		cr := draNetwork(vmi, iface)
		if iface.SRIOV == nil || cr == nil {
			continue
		}
		field := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		dev, err := draDevice(d, field, "SR-IOV interface", iface.Name, cr)
		if err != nil {
			return nil, err
		}
		if dev.PCIBusID == "" {
			return nil, fmt.Errorf("%s: SR-IOV interface %q: DRA metadata of claim %q request %q has no resource.kubernetes.io/pciBusID", field, iface.Name, cr.ClaimName, cr.RequestName)
		}
		hd, err := sriovHostdev(field, iface, dev.PCIBusID)
		if err != nil {
			return nil, err
		}
		out = append(out, hd)
	}
	return out, nil
}
