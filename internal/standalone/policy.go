package standalone

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
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
	if len(d.Devices.GPUs) > 0 {
		return fmt.Errorf("spec.domain.devices.gpus: vlctl run does not pass host devices through (no device plugin here)")
	}
	if len(d.Devices.HostDevices) > 0 {
		return fmt.Errorf("spec.domain.devices.hostDevices: vlctl run does not pass host devices through (no device plugin here)")
	}
	for i, ifc := range d.Devices.Interfaces {
		if ifc.SRIOV != nil {
			return fmt.Errorf("spec.domain.devices.interfaces[%d].sriov: vlctl run does not pass host devices through (no device plugin here)", i)
		}
	}
	if d.CPU != nil && d.CPU.DedicatedCPUPlacement {
		return fmt.Errorf("spec.domain.cpu.dedicatedCpuPlacement: vlctl run has no CPU manager to give dedicated CPUs; remove it")
	}
	return nil
}
