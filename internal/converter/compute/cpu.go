package compute

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// TCGMode is the CPU mode used instead of host-model/host-passthrough under
// emulation: TCG cannot copy the host CPU. libvirt 9.0 has no custom model
// "max" ("Unknown CPU model max" at start), but its mode "maximum" is QEMU's
// -cpu max: every feature TCG implements (modern distributions need
// x86-64-v2 at least, which the default qemu64 lacks).
const TCGMode = "maximum"

// maxVCPUs is the most vCPUs KubeVirt lets one VMI have.
const maxVCPUs = 512

// CPU fills <cpu> (mode, model, features, topology), <vcpu> and, for CPU
// hotplug, <vcpus>. Dedicated CPUs are CPUPinning's (pinning.go).
type CPU struct{ Ctx *facts.Context }

var featurePolicies = map[string]bool{"": true, "force": true, "require": true, "optional": true, "disable": true, "forbid": true}

func (c CPU) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	spec := vmi.Spec.Domain.CPU
	if spec == nil {
		spec = &v1.CPU{}
	}
	a := arch(vmi, c.Ctx)
	sockets, cores, threads := facts.Topology(vmi)
	booted := uint64(sockets) * uint64(cores) * uint64(threads)
	if booted > maxVCPUs {
		return fmt.Errorf("spec.domain.cpu: %d vCPUs (sockets x cores x threads) is more than %d", booted, maxVCPUs)
	}
	out := &libvirtxml.DomainCPU{}
	model := spec.Model
	if model == "" {
		model = v1.DefaultCPUModel
		if a == "arm64" {
			model = v1.CPUModeHostPassthrough
		}
	}
	switch {
	case c.Ctx.Emulation && (model == v1.CPUModeHostModel || model == v1.CPUModeHostPassthrough):
		out.Mode = TCGMode
	case model == v1.CPUModeHostModel || model == v1.CPUModeHostPassthrough:
		out.Mode = model
	default:
		out.Mode = "custom"
		out.Model = &libvirtxml.DomainCPUModel{Value: model}
	}
	listedMPX := false
	for i, f := range spec.Features {
		if f.Name == "" {
			return fmt.Errorf("spec.domain.cpu.features[%d].name: must not be empty", i)
		}
		if !featurePolicies[f.Policy] {
			return fmt.Errorf("spec.domain.cpu.features[%d].policy: %q is not one of force, require, optional, disable, forbid", i, f.Policy)
		}
		listedMPX = listedMPX || f.Name == "mpx"
		policy := f.Policy
		if policy == "" {
			policy = "require" // libvirt's schema wants a policy; require is KubeVirt's meaning of none
		}
		out.Features = append(out.Features, libvirtxml.DomainCPUFeature{Name: f.Name, Policy: policy})
	}
	if a == "amd64" && out.Mode == "custom" && !listedMPX {
		// Named models may carry MPX, which current hosts lack (KubeVirt does the same).
		out.Features = append(out.Features, libvirtxml.DomainCPUFeature{Name: "mpx", Policy: "disable"})
	}

	total := booted
	topoSockets := sockets
	if spec.MaxSockets != 0 && a != "arm64" {
		if spec.MaxSockets < sockets {
			return fmt.Errorf("spec.domain.cpu.maxSockets: %d is less than sockets %d", spec.MaxSockets, sockets)
		}
		topoSockets = spec.MaxSockets
		total = uint64(topoSockets) * uint64(cores) * uint64(threads)
		if total > maxVCPUs {
			return fmt.Errorf("spec.domain.cpu.maxSockets: %d vCPUs (maxSockets x cores x threads) is more than %d", total, maxVCPUs)
		}
	}
	out.Topology = &libvirtxml.DomainCPUTopology{Sockets: int(topoSockets), Cores: int(cores), Threads: int(threads)}
	dom.CPU = out
	dom.VCPU = &libvirtxml.DomainVCPU{Placement: "static", Value: uint(total)}
	if total > booted {
		perSocket := uint64(cores) * uint64(threads)
		vcpus := &libvirtxml.DomainVCPUs{}
		for id := uint64(0); id < total; id++ {
			vcpus.VCPU = append(vcpus.VCPU, libvirtxml.DomainVCPUsVCPU{
				Id:           uintPtr(uint(id)),
				Enabled:      yesNo(id < booted),
				Hotpluggable: yesNo(id >= perSocket),
			})
		}
		dom.VCPUs = vcpus
	}
	return nil
}
