package premigration

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// The hooks KubeVirt v1.9.0's launcher registers: DedicatedCPUs and
// DiskSourcePaths always (v1.8.2 had only the CPU one), OrdinalTapNames
// with --upgrade-ordinal-ifaces. Its vGPU hook (--vgpu-dedicated-hook) has
// no counterpart here.

// DedicatedCPUs gives the incoming domain of a VMI with dedicated CPUs the
// CPU placement of target, the domain this pod's conversion of the VMI
// made: the CPU topology, the vCPU count, <cputune> (the pins on this pod's
// CPUs), <numatune> and the features, which follow from the placement; the
// source pod's pins name CPUs this pod may not have. These are the fields
// KubeVirt's CPUDedicatedHook replaces. Nil for a VMI without dedicated
// CPUs.
func DedicatedCPUs(v *v1.VirtualMachineInstance, target *libvirtxml.Domain) Hook {
	if !v.IsCPUDedicated() {
		return nil
	}
	return func(dom *libvirtxml.Domain) error {
		if dom.CPU == nil {
			dom.CPU = &libvirtxml.DomainCPU{}
		}
		dom.CPU.Topology = nil
		if target.CPU != nil {
			dom.CPU.Topology = target.CPU.Topology
		}
		dom.VCPU = target.VCPU
		dom.CPUTune = target.CPUTune
		dom.NUMATune = target.NUMATune
		dom.Features = target.Features
		return nil
	}
}

// DiskSourcePaths moves the incoming disks' file sources (and their data
// stores') from the source's domain namespace to the target's, for a
// migration whose target names another one
// (status.migrationState.targetState.domainNamespace; the source's from
// sourceState, else the VMI's namespace): the first "/<source ns>/" of a
// path becomes "/<target ns>/". Nil when the namespace stays.
func DiskSourcePaths(v *v1.VirtualMachineInstance) Hook {
	from, to := v.Namespace, ""
	if ms := v.Status.MigrationState; ms != nil {
		if ss := ms.SourceState; ss != nil && ss.DomainNamespace != nil {
			from = *ss.DomainNamespace
		}
		if ts := ms.TargetState; ts != nil && ts.DomainNamespace != nil {
			to = *ts.DomainNamespace
		}
	}
	if to == "" || to == from {
		return nil
	}
	move := func(f *libvirtxml.DomainDiskSourceFile) {
		if f != nil {
			f.File = strings.Replace(f.File, "/"+from+"/", "/"+to+"/", 1)
		}
	}
	return func(dom *libvirtxml.Domain) error {
		if dom.Devices == nil {
			return nil
		}
		for i := range dom.Devices.Disks {
			src := dom.Devices.Disks[i].Source
			if src == nil {
				continue
			}
			move(src.File)
			if ds := src.DataStore; ds != nil && ds.Source != nil {
				move(ds.Source.File)
			}
		}
		return nil
	}
}

var ordinalTap = regexp.MustCompile(`^tap\d+$`)

// OrdinalTapNames renames the incoming interfaces' taps from KubeVirt's
// ordinal scheme (tap1, tap2, ... of pod interfaces net1, net2, ...) to
// the hashed one this pod's network has (tap<hash> of pod<hash>), found
// by the network each interface's alias (ua-<network>) names; tap0 stays.
// KubeVirt's UpgradeOrdinalNamingScheme (--upgrade-ordinal-ifaces).
func OrdinalTapNames(v *v1.VirtualMachineInstance) Hook {
	podIface := map[string]string{}
	for _, n := range v.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		if n.Multus.Default {
			podIface[n.Name] = "eth0"
		} else {
			podIface[n.Name] = plan.HashedPodIfaceName(n.Name)
		}
	}
	return func(dom *libvirtxml.Domain) error {
		if dom.Devices == nil {
			return nil
		}
		for i := range dom.Devices.Interfaces {
			iface := &dom.Devices.Interfaces[i]
			if iface.Target == nil || iface.Target.Dev == "tap0" || !ordinalTap.MatchString(iface.Target.Dev) {
				continue
			}
			if iface.Alias == nil {
				return fmt.Errorf("interface with tap %s: no alias to name its network", iface.Target.Dev)
			}
			net, ok := strings.CutPrefix(iface.Alias.Name, "ua-")
			if !ok {
				return fmt.Errorf("interface with tap %s: alias %q is not ua-<network>", iface.Target.Dev, iface.Alias.Name)
			}
			name, ok := podIface[net]
			if !ok {
				return errors.New("interface with tap " + iface.Target.Dev + ": network " + net + " is no Multus network of the VMI")
			}
			iface.Target.Dev = plan.TapName(name)
		}
		return nil
	}
}
