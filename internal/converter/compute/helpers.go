package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// Small helpers shared by the configurators of this package. The
// architecture and virtio-model rules live in facts so that storage and
// network use the very same ones.

func arch(vmi *v1.VirtualMachineInstance, c *facts.Context) string { return facts.Arch(vmi, c) }

func virtioModel(vmi *v1.VirtualMachineInstance, c *facts.Context) string {
	return facts.VirtioModel(vmi, c)
}

// enabled reports a KubeVirt feature state: present and not explicitly off.
func enabled(f *v1.FeatureState) bool { return f != nil && (f.Enabled == nil || *f.Enabled) }

// onOff spells a feature state the way libvirt wants it.
func onOff(f *v1.FeatureState) string {
	if enabled(f) {
		return "on"
	}
	return "off"
}

// yesNo spells a boolean the way libvirt wants it.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// notFalse reads a KubeVirt *bool whose nil means true (autoattach flags).
func notFalse(b *bool) bool { return b == nil || *b }

func uintPtr(v uint) *uint { return &v }

// devices returns dom.Devices, creating it when a test built a bare domain.
func devices(dom *libvirtxml.Domain) *libvirtxml.DomainDeviceList {
	if dom.Devices == nil {
		dom.Devices = &libvirtxml.DomainDeviceList{}
	}
	return dom.Devices
}

// features returns dom.Features, creating it on first use.
func features(dom *libvirtxml.Domain) *libvirtxml.DomainFeatureList {
	if dom.Features == nil {
		dom.Features = &libvirtxml.DomainFeatureList{}
	}
	return dom.Features
}

// domainOS returns dom.OS, creating it on first use.
func domainOS(dom *libvirtxml.Domain) *libvirtxml.DomainOS {
	if dom.OS == nil {
		dom.OS = &libvirtxml.DomainOS{}
	}
	return dom.OS
}
