package domain

import (
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// TestRefuseMediatedDevices: a migration target refuses an incoming domain
// with vGPUs, naming them, and takes one with PCI host devices or none.
func TestRefuseMediatedDevices(t *testing.T) {
	pci := libvirtxml.DomainHostdev{Alias: &libvirtxml.DomainAlias{Name: "ua-hostdevice-nic"},
		SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{}}
	mdev := libvirtxml.DomainHostdev{Alias: &libvirtxml.DomainAlias{Name: "ua-gpu-vgpu1"},
		SubsysMDev: &libvirtxml.DomainHostdevSubsysMDev{Model: "vfio-pci"}}
	for _, tc := range []struct {
		name     string
		hostdevs []libvirtxml.DomainHostdev
		err      string
	}{
		{"a domain without host devices is taken", nil, ""},
		{"PCI host devices alone are taken", []libvirtxml.DomainHostdev{pci}, ""},
		{"a vGPU is refused by its alias", []libvirtxml.DomainHostdev{pci, mdev}, "mediated devices (ua-gpu-vgpu1): vGPU live migration is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := refuseMediatedDevices(&libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Hostdevs: tc.hostdevs}})
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
