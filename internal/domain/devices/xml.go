package devices

import (
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// The XML helpers of the plan and the appliers: devices are matched by the
// alias the converter gave them ("ua-<VMI name>").

// hotplugBus reports the buses KubeVirt hotplugs disks on.
func hotplugBus(bus string) bool {
	return bus == string(v1.DiskBusSCSI) || bus == string(v1.DiskBusVirtio)
}

func diskBus(d *libvirtxml.DomainDisk) string {
	if d.Target == nil {
		return ""
	}
	return d.Target.Bus
}

func diskAlias(d libvirtxml.DomainDisk) *libvirtxml.DomainAlias { return d.Alias }

// findInterface is the interface with the user alias of VMI interface name.
func findInterface(ifaces []libvirtxml.DomainInterface, name string) (libvirtxml.DomainInterface, bool) {
	for _, i := range ifaces {
		if n, ok := userAlias(i.Alias); ok && n == name {
			return i, true
		}
	}
	return libvirtxml.DomainInterface{}, false
}

// findDisk finds the disk of VMI name among disks.
func findDisk(disks []libvirtxml.DomainDisk, name string) (libvirtxml.DomainDisk, bool) {
	for _, d := range disks {
		if n, ok := userAlias(d.Alias); ok && n == name {
			return d, true
		}
	}
	return libvirtxml.DomainDisk{}, false
}

func byAlias[T any](items []T, alias func(T) *libvirtxml.DomainAlias) map[string]T {
	out := make(map[string]T, len(items))
	for _, it := range items {
		if name, ok := userAlias(alias(it)); ok {
			out[name] = it
		}
	}
	return out
}

func linkWord(down bool) string {
	if down {
		return string(v1.InterfaceStateLinkDown)
	}
	return string(v1.InterfaceStateLinkUp)
}

// userAlias returns the VMI name behind a launcher-chosen alias ("ua-").
func userAlias(a *libvirtxml.DomainAlias) (string, bool) {
	if a == nil {
		return "", false
	}
	return strings.CutPrefix(a.Name, domainjson.UserAliasPrefix)
}

func diskSourcePath(d *libvirtxml.DomainDisk) string { return pathOf(d.Source) }

func pathOf(s *libvirtxml.DomainDiskSource) string {
	switch {
	case s == nil:
		return ""
	case s.File != nil:
		return s.File.File
	case s.Block != nil:
		return s.Block.Dev
	}
	return ""
}

func underDir(path, dir string) bool {
	return dir != "" && path != "" && strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
