package compute

import (
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// SysInfo fills the SMBIOS system (and chassis) tables: the firmware UUID and
// serial from the VMI, the rest from the cluster's SMBIOS settings. Entries
// with an empty value are left out: libvirt's schema refuses empty ones.
type SysInfo struct{ Ctx *facts.Context }

func (s SysInfo) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	smbios := &libvirtxml.DomainSysInfoSMBIOS{}
	var uuid, serial string
	if fw := vmi.Spec.Domain.Firmware; fw != nil {
		uuid, serial = string(fw.UUID), fw.Serial
	}
	sys := entries(
		"uuid", uuid,
		"serial", serial,
		"manufacturer", s.Ctx.SMBIOS.Manufacturer,
		"family", s.Ctx.SMBIOS.Family,
		"product", s.Ctx.SMBIOS.Product,
		"sku", s.Ctx.SMBIOS.SKU,
		"version", s.Ctx.SMBIOS.Version,
	)
	if len(sys) > 0 {
		smbios.System = &libvirtxml.DomainSysInfoSystem{Entry: sys}
	}
	if c := vmi.Spec.Domain.Chassis; c != nil {
		ch := entries(
			"manufacturer", c.Manufacturer,
			"version", c.Version,
			"serial", c.Serial,
			"asset", c.Asset,
			"sku", c.Sku,
		)
		if len(ch) > 0 {
			smbios.Chassis = &libvirtxml.DomainSysInfoChassis{Entry: ch}
		}
	}
	if smbios.System == nil && smbios.Chassis == nil {
		return nil
	}
	dom.SysInfo = append(dom.SysInfo, libvirtxml.DomainSysInfo{SMBIOS: smbios})
	return nil
}

// entries turns name/value pairs into sysinfo entries, skipping empty values.
func entries(kv ...string) []libvirtxml.DomainSysInfoEntry {
	var out []libvirtxml.DomainSysInfoEntry
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out = append(out, libvirtxml.DomainSysInfoEntry{Name: kv[i], Value: kv[i+1]})
		}
	}
	return out
}
