package standalone

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
)

// restartPolicy is what a VirtualMachine's run strategy means for
// `vlctl run`, which plays the VM controller's part for one VM: the run is
// the request to start it, and the strategy says whether a stopped guest is
// started again (KubeVirt's pkg/virt-controller/watch/vm.go).
type restartPolicy struct {
	afterPowerOff bool // the guest powered itself off
	afterFailure  bool // the guest crashed or its launcher failed
}

// runPolicy decides from spec.running / spec.runStrategy whether the VM runs
// and when it is started again; force is --force-start. A VMI (vm nil) and
// a VM with neither field run once (KubeVirt's API refuses the latter, but
// `vlctl run` is itself a start request).
func runPolicy(vm *v1.VirtualMachine, force bool) (restartPolicy, error) {
	if vm == nil {
		return restartPolicy{}, nil
	}
	s := vm.Spec
	field := "spec.runStrategy"
	var strategy v1.VirtualMachineRunStrategy
	switch {
	case s.Running != nil && s.RunStrategy != nil:
		return restartPolicy{}, fmt.Errorf("spec.running and spec.runStrategy: give one of them (spec.running is deprecated)")
	case s.Running != nil:
		field = fmt.Sprintf("spec.running: %t", *s.Running)
		strategy = v1.RunStrategyHalted
		if *s.Running {
			strategy = v1.RunStrategyAlways
		}
	case s.RunStrategy != nil:
		strategy = *s.RunStrategy
		field += ": " + string(strategy)
	default:
		return restartPolicy{}, nil
	}
	switch strategy {
	case v1.RunStrategyAlways:
		return restartPolicy{afterPowerOff: true, afterFailure: true}, nil
	case v1.RunStrategyRerunOnFailure:
		return restartPolicy{afterFailure: true}, nil
	case v1.RunStrategyManual, v1.RunStrategyOnce:
		return restartPolicy{}, nil
	case v1.RunStrategyHalted:
		if force {
			return restartPolicy{}, nil
		}
		return restartPolicy{}, fmt.Errorf("%s: the VM is to stay stopped; start it anyway with --force-start", field)
	case v1.RunStrategyWaitAsReceiver:
		return restartPolicy{}, fmt.Errorf("%s: the VM waits for a migration, which vlctl run cannot receive", field)
	}
	return restartPolicy{}, fmt.Errorf("%s: not a run strategy (want Always, RerunOnFailure, Manual, Once or Halted)", field)
}

// restartDelay is how long to wait before starting a guest again after its
// n-th failure in a row: KubeVirt's VM controller backs off exponentially
// up to 5 minutes; a guest that powered off restarts at once.
func restartDelay(failures int) time.Duration {
	if failures == 0 {
		return 0
	}
	d := time.Second << min(failures-1, 9)
	return min(d, 5*time.Minute)
}

// minBootMemory is less than any Linux distribution's kernel and initrd
// need to print their first line; below it the console just stays empty.
var minBootMemory = resource.MustParse("64Mi")

// memoryWarning says when the guest's memory is too small to boot with.
func memoryWarning(v *v1.VirtualMachineInstance) string {
	d := v.Spec.Domain
	field, q := "", resource.Quantity{}
	if d.Memory != nil && d.Memory.Guest != nil {
		field, q = "spec.domain.memory.guest", *d.Memory.Guest
	} else if r, ok := d.Resources.Requests["memory"]; ok {
		field, q = "spec.domain.resources.requests.memory", r
	} else if r, ok := d.Resources.Limits["memory"]; ok {
		field, q = "spec.domain.resources.limits.memory", r
	}
	if field == "" || q.Cmp(minBootMemory) >= 0 {
		return ""
	}
	return fmt.Sprintf("vlctl: warning: %s %s: guests need at least %s to boot (with less the console stays empty)", field, q.String(), minBootMemory.String())
}

// runUnsupported refuses what `vlctl run` cannot give a VMI, before anything
// is made, naming the field (the launcher's own hints name flags of a
// cluster or of `vlctl convert`).
func runUnsupported(v *v1.VirtualMachineInstance) error {
	d := v.Spec.Domain
	for i, ifc := range d.Devices.Interfaces {
		if ifc.SRIOV != nil {
			return fmt.Errorf("spec.domain.devices.interfaces[%d].sriov: vlctl run does not pass SR-IOV virtual functions through (no Multus or SR-IOV CNI here; a GPU or host device takes --device)", i)
		}
		if ifc.Binding != nil {
			return fmt.Errorf("spec.domain.devices.interfaces[%d].binding: vlctl run has no network binding plugins (the KubeVirt CR's network.binding, the plugins' sidecar images and CNI plugins are a cluster's)", i)
		}
	}
	return nil
}

// runCPUs checks --cpuset against the VMI and the CPUs vlctl itself may
// use (its own cgroup's), before anything is made. vlctl run plays the CPU
// manager: the VM's pod runs in a cpuset cgroup of these CPUs, where its
// launcher reads them as in a cluster. A VMI with dedicatedCpuPlacement
// needs the flag; one without may still be confined by it.
func runCPUs(v *v1.VirtualMachineInstance, cpus, mayUse []uint) error {
	cpu := v.Spec.Domain.CPU
	dedicated := cpu != nil && cpu.DedicatedCPUPlacement
	if len(cpus) == 0 {
		if dedicated {
			return fmt.Errorf("spec.domain.cpu.dedicatedCpuPlacement: vlctl run has no CPU manager: give the VM its host CPUs with --cpuset LIST (e.g. --cpuset 2-3; this machine lets vlctl use %s)", hostcpu.FormatList(mayUse))
		}
		return nil
	}
	allowed := map[uint]bool{}
	for _, c := range mayUse {
		allowed[c] = true
	}
	for _, c := range cpus {
		if !allowed[c] {
			return fmt.Errorf("--cpuset: CPU %d is not one vlctl may use (%s)", c, hostcpu.FormatList(mayUse))
		}
	}
	if !dedicated {
		return nil
	}
	s, c, t := facts.Topology(v)
	need := uint64(s) * uint64(c) * uint64(t)
	if cpu.IsolateEmulatorThread {
		need++
	}
	if uint64(len(cpus)) < need {
		return fmt.Errorf("--cpuset: %s is %d CPUs; the VM's dedicated CPUs need %d (one per vCPU, one more for isolateEmulatorThread)", hostcpu.FormatList(cpus), len(cpus), need)
	}
	return nil
}
