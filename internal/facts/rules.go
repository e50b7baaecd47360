package facts

import (
	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"
)

// Rules shared by several configurators (compute, storage, network). They
// read only the VMI and the Context.

// Arch is the guest architecture in GOARCH spelling. The VMI's
// spec.architecture wins over the launcher's own (Context.Arch).
func Arch(vmi *v1.VirtualMachineInstance, c *Context) string {
	a := vmi.Spec.Architecture
	if a == "" {
		a = c.Arch
	}
	switch a {
	case "", "x86_64":
		return "amd64"
	case "aarch64":
		return "arm64"
	}
	return a
}

// LibvirtArch is libvirt's name of a GOARCH (amd64 is x86_64); names the
// two share pass through. It says nothing about what the converter
// supports.
func LibvirtArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	}
	return goarch
}

// VirtioModel is the model name virtio devices get: non-transitional by
// default, transitional on request, plain "virtio" on s390x.
func VirtioModel(vmi *v1.VirtualMachineInstance, c *Context) string {
	if Arch(vmi, c) == "s390x" {
		return "virtio"
	}
	if t := vmi.Spec.Domain.Devices.UseVirtioTransitional; t != nil && *t {
		return "virtio-transitional"
	}
	return "virtio-non-transitional"
}

// Topology is the booted CPU topology: the spec's numbers with 0 read as 1;
// when all three are 0, sockets come from limits.cpu, else requests.cpu
// (rounded up), as KubeVirt does.
func Topology(vmi *v1.VirtualMachineInstance) (sockets, cores, threads uint32) {
	cpu := vmi.Spec.Domain.CPU
	if cpu != nil {
		sockets, cores, threads = cpu.Sockets, cpu.Cores, cpu.Threads
	}
	if sockets == 0 && cores == 0 && threads == 0 {
		res := vmi.Spec.Domain.Resources
		if q, ok := res.Limits[k8sv1.ResourceCPU]; ok && q.Sign() > 0 {
			sockets = uint32(min(q.MilliValue()+999, 1<<40) / 1000)
		} else if q, ok := res.Requests[k8sv1.ResourceCPU]; ok && q.Sign() > 0 {
			sockets = uint32(min(q.MilliValue()+999, 1<<40) / 1000)
		}
	}
	return max(sockets, 1), max(cores, 1), max(threads, 1)
}

// VCPUs is the booted vCPU count (sockets x cores x threads, not maxSockets).
func VCPUs(vmi *v1.VirtualMachineInstance) uint64 {
	s, c, t := Topology(vmi)
	return uint64(s) * uint64(c) * uint64(t)
}

// HotplugVolume reports whether the VMI's status marks volume name as
// hotplugged, and whether virt-handler has mounted it into the pod yet
// (phase MountedToPod or Ready). Until it is mounted there is no file to
// attach: the disk waits (a CD-ROM stays an empty drive), as in KubeVirt.
func HotplugVolume(vmi *v1.VirtualMachineInstance, name string) (hotplug, mounted bool) {
	for _, st := range vmi.Status.VolumeStatus {
		if st.Name == name && st.HotplugVolume != nil {
			return true, st.Phase == v1.HotplugVolumeMounted || st.Phase == v1.VolumeReady
		}
	}
	return false, false
}

// VirtiofsVolume reports whether volume name is shared with the guest by
// a virtiofs filesystem. Such a volume is no disk: the launcher neither
// reads it nor builds an image of it (a configMap gets no ISO); its
// virtiofsd serves it.
func VirtiofsVolume(vmi *v1.VirtualMachineInstance, name string) bool {
	for _, fs := range vmi.Spec.Domain.Devices.Filesystems {
		if fs.Name == name && fs.Virtiofs != nil {
			return true
		}
	}
	return false
}
