package instancetype

import (
	"fmt"
	"maps"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// ApplySpecs applies an instancetype (may be nil) and then a preference
// (may be nil) to a VMI spec and its metadata. It returns the fields
// (below spec.template.spec, or an annotation) that the VMI sets and the
// instancetype sets too; then nothing of the preference is applied.
func ApplySpecs(it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec,
	spec *v1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) []string {
	if it != nil {
		var c []string
		for _, step := range []func(*v1beta1.VirtualMachineInstancetypeSpec, *v1.VirtualMachineInstanceSpec) []string{
			applyScheduling, applyCPU(pref), applyMemory, applyIO, applyDevices,
		} {
			c = append(c, step(it, spec)...)
		}
		c = append(c, mergeAnnotations(meta, it.Annotations, true)...)
		if len(c) > 0 {
			return c
		}
	}
	if pref != nil {
		applyPreference(pref, spec)
		mergeAnnotations(meta, pref.Annotations, false)
	}
	return nil
}

func field(parts ...string) string {
	f := fieldBase
	for _, p := range parts {
		f += "." + p
	}
	return f
}

func applyScheduling(it *v1beta1.VirtualMachineInstancetypeSpec, spec *v1.VirtualMachineInstanceSpec) []string {
	var c []string
	if it.NodeSelector != nil {
		if spec.NodeSelector != nil {
			c = append(c, field("nodeSelector"))
		} else {
			spec.NodeSelector = maps.Clone(it.NodeSelector)
		}
	}
	if it.SchedulerName != "" {
		if spec.SchedulerName != "" {
			c = append(c, field("schedulerName"))
		} else {
			spec.SchedulerName = it.SchedulerName
		}
	}
	return c
}

// applyCPU gives the guest the instancetype's vCPUs in the preference's
// topology. Any CPU resource or topology of the VM's own is a conflict, and
// so is a model, placement, emulator thread, NUMA or realtime setting that
// both give.
func applyCPU(pref *v1beta1.VirtualMachinePreferenceSpec) func(*v1beta1.VirtualMachineInstancetypeSpec, *v1.VirtualMachineInstanceSpec) []string {
	return func(it *v1beta1.VirtualMachineInstancetypeSpec, spec *v1.VirtualMachineInstanceSpec) []string {
		if spec.Domain.CPU == nil {
			spec.Domain.CPU = &v1.CPU{}
		}
		cpu, want := spec.Domain.CPU, it.CPU
		var c []string
		if _, ok := spec.Domain.Resources.Requests[k8sv1.ResourceCPU]; ok {
			c = append(c, field("domain.resources.requests.cpu"))
		}
		if _, ok := spec.Domain.Resources.Limits[k8sv1.ResourceCPU]; ok {
			c = append(c, field("domain.resources.limits.cpu"))
		}
		for _, t := range []struct {
			name string
			set  bool
		}{
			{"sockets", cpu.Sockets != 0},
			{"cores", cpu.Cores != 0},
			{"threads", cpu.Threads != 0},
			{"model", cpu.Model != "" && want.Model != nil},
			{"dedicatedCPUPlacement", cpu.DedicatedCPUPlacement && want.DedicatedCPUPlacement != nil},
			{"isolateEmulatorThread", cpu.IsolateEmulatorThread && want.IsolateEmulatorThread != nil},
			{"numa", cpu.NUMA != nil && want.NUMA != nil},
			{"realtime", cpu.Realtime != nil && want.Realtime != nil},
		} {
			if t.set {
				c = append(c, field("domain.cpu."+t.name))
			}
		}
		if len(c) > 0 {
			return c
		}
		if want.Model != nil {
			cpu.Model = *want.Model
		}
		if want.DedicatedCPUPlacement != nil {
			cpu.DedicatedCPUPlacement = *want.DedicatedCPUPlacement
		}
		if want.IsolateEmulatorThread != nil {
			cpu.IsolateEmulatorThread = *want.IsolateEmulatorThread
		}
		if want.NUMA != nil {
			cpu.NUMA = want.NUMA.DeepCopy()
		}
		if want.Realtime != nil {
			cpu.Realtime = want.Realtime.DeepCopy()
		}
		if want.MaxSockets != nil {
			cpu.MaxSockets = *want.MaxSockets
		}
		cpu.Sockets, cpu.Cores, cpu.Threads = topology(want.Guest, pref)
		return nil
	}
}

// topology lays vCPUs out as the preference prefers: all sockets unless it
// says cores, threads or spread.
func topology(vcpus uint32, pref *v1beta1.VirtualMachinePreferenceSpec) (sockets, cores, threads uint32) {
	if vcpus == 1 {
		return 1, 1, 1
	}
	switch preferredTopology(pref) {
	case v1beta1.Cores, v1beta1.DeprecatedPreferCores:
		return 1, vcpus, 1
	case v1beta1.Threads, v1beta1.DeprecatedPreferThreads:
		return 1, 1, vcpus
	case v1beta1.Spread, v1beta1.DeprecatedPreferSpread:
		ratio, across := spreadOptions(pref)
		switch across {
		case v1beta1.SpreadAcrossCoresThreads:
			return 1, vcpus / ratio, ratio
		case v1beta1.SpreadAcrossSocketsCoresThreads:
			return vcpus / spreadThreads / ratio, ratio, spreadThreads
		default: // SocketsCores
			return vcpus / ratio, ratio, 1
		}
	default: // sockets, any
		return vcpus, 1, 1
	}
}

// spreadThreads is the threads per core of a spread across sockets, cores
// and threads.
const spreadThreads = 2

func preferredTopology(pref *v1beta1.VirtualMachinePreferenceSpec) v1beta1.PreferredCPUTopology {
	if pref != nil && pref.CPU != nil && pref.CPU.PreferredCPUTopology != nil {
		return *pref.CPU.PreferredCPUTopology
	}
	return v1beta1.Sockets
}

// spreadOptions are the ratio (default 2, or the older
// preferSpreadSocketToCoreRatio) and what a spread goes across.
func spreadOptions(pref *v1beta1.VirtualMachinePreferenceSpec) (uint32, v1beta1.SpreadAcross) {
	ratio, across := uint32(2), v1beta1.SpreadAcrossSocketsCores
	if pref == nil {
		return ratio, across
	}
	if pref.PreferSpreadSocketToCoreRatio != 0 {
		ratio = pref.PreferSpreadSocketToCoreRatio
	}
	if pref.CPU != nil && pref.CPU.SpreadOptions != nil {
		if o := pref.CPU.SpreadOptions; o.Across != nil {
			across = *o.Across
		}
		if o := pref.CPU.SpreadOptions; o.Ratio != nil {
			ratio = *o.Ratio
		}
	}
	return ratio, across
}

// checkSpread refuses a spread the instancetype's vCPUs do not divide into.
func checkSpread(it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec) error {
	t := preferredTopology(pref)
	if it == nil || (t != v1beta1.Spread && t != v1beta1.DeprecatedPreferSpread) {
		return nil
	}
	ratio, across := spreadOptions(pref)
	n := it.CPU.Guest
	if ratio == 0 {
		return fmt.Errorf("instancetype.spec.cpu.guest: a spread ratio of 0 lays out no vCPUs")
	}
	switch across {
	case v1beta1.SpreadAcrossSocketsCoresThreads:
		if n%spreadThreads != 0 || (n/spreadThreads)%ratio != 0 {
			return fmt.Errorf("instancetype.spec.cpu.guest: %d vCPUs do not divide into %d threads per core and a spread ratio of %d", n, spreadThreads, ratio)
		}
	default:
		if n%ratio != 0 {
			return fmt.Errorf("instancetype.spec.cpu.guest: %d vCPUs are not divisible by the preference's spread ratio %d (%s)", n, ratio, across)
		}
	}
	return nil
}

// applyMemory gives the guest the instancetype's memory; memory the VM
// sets itself (guest, requests, limits) is a conflict, and so are
// hugepages and a maximum both give.
func applyMemory(it *v1beta1.VirtualMachineInstancetypeSpec, spec *v1.VirtualMachineInstanceSpec) []string {
	if spec.Domain.Memory == nil {
		spec.Domain.Memory = &v1.Memory{}
	}
	m, want := spec.Domain.Memory, it.Memory
	// KubeVirt reports the first of these only.
	switch _, req := spec.Domain.Resources.Requests[k8sv1.ResourceMemory]; {
	case m.Guest != nil:
		return []string{field("domain.memory.guest")}
	case m.Hugepages != nil && want.Hugepages != nil:
		return []string{field("domain.memory.hugepages")}
	case m.MaxGuest != nil && want.MaxGuest != nil:
		return []string{field("domain.memory.maxGuest")}
	case req:
		return []string{field("domain.resources.requests.memory")}
	}
	if _, lim := spec.Domain.Resources.Limits[k8sv1.ResourceMemory]; lim {
		return []string{field("domain.resources.limits.memory")}
	}
	guest := want.Guest.DeepCopy()
	m.Guest = &guest
	if pct := want.OvercommitPercent; pct > 0 {
		// The pod asks for less than the guest gets, by the percentage
		// (computed in float32, as KubeVirt does, so the bytes agree).
		if spec.Domain.Resources.Requests == nil {
			spec.Domain.Resources.Requests = k8sv1.ResourceList{}
		}
		req := int64(float32(guest.Value()) * (1 - float32(pct)/100))
		spec.Domain.Resources.Requests[k8sv1.ResourceMemory] = *resource.NewQuantity(req, guest.Format)
	}
	if want.Hugepages != nil {
		m.Hugepages = want.Hugepages.DeepCopy()
	}
	if want.MaxGuest != nil {
		q := want.MaxGuest.DeepCopy()
		m.MaxGuest = &q
	}
	return nil
}

func applyIO(it *v1beta1.VirtualMachineInstancetypeSpec, spec *v1.VirtualMachineInstanceSpec) []string {
	var c []string
	if it.IOThreads != nil && it.IOThreads.SupplementalPoolThreadCount != nil {
		if spec.Domain.IOThreads != nil && spec.Domain.IOThreads.SupplementalPoolThreadCount != nil {
			c = append(c, field("domain.ioThreads.supplementalPoolThreadCount"))
		} else {
			if spec.Domain.IOThreads == nil {
				spec.Domain.IOThreads = &v1.DiskIOThreads{}
			}
			n := *it.IOThreads.SupplementalPoolThreadCount
			spec.Domain.IOThreads.SupplementalPoolThreadCount = &n
		}
	}
	if it.IOThreadsPolicy != nil {
		if spec.Domain.IOThreadsPolicy != nil {
			c = append(c, field("domain.ioThreadsPolicy"))
		} else {
			p := *it.IOThreadsPolicy
			spec.Domain.IOThreadsPolicy = &p
		}
	}
	if it.LaunchSecurity != nil {
		if spec.Domain.LaunchSecurity != nil {
			c = append(c, field("domain.launchSecurity"))
		} else {
			spec.Domain.LaunchSecurity = it.LaunchSecurity.DeepCopy()
		}
	}
	return c
}

func applyDevices(it *v1beta1.VirtualMachineInstancetypeSpec, spec *v1.VirtualMachineInstanceSpec) []string {
	var c []string
	d := &spec.Domain.Devices
	if len(it.GPUs) > 0 {
		if len(d.GPUs) > 0 {
			c = append(c, field("domain.devices.gpus"))
		} else {
			d.GPUs = append([]v1.GPU(nil), it.GPUs...)
		}
	}
	if len(it.HostDevices) > 0 {
		if len(d.HostDevices) > 0 {
			c = append(c, field("domain.devices.hostDevices"))
		} else {
			d.HostDevices = append([]v1.HostDevice(nil), it.HostDevices...)
		}
	}
	return c
}

// mergeAnnotations adds annotations the VMI lacks. From an instancetype
// (strict) a different value of the VMI's own is a conflict; a
// preference's never overrides.
func mergeAnnotations(meta *metav1.ObjectMeta, add map[string]string, strict bool) []string {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	var c []string
	for k, v := range add {
		old, ok := meta.Annotations[k]
		switch {
		case !ok:
			meta.Annotations[k] = v
		case strict && old != v:
			c = append(c, "annotations."+k)
		}
	}
	return c
}
