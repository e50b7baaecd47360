package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestPCIPlacement(t *testing.T) {
	const gpuEnv = "PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40"
	gpu := func(dedicated bool) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.GPUs = []v1.GPU{{Name: "gpu1", DeviceName: "nvidia.com/GP102GL_Tesla_P40"}}
			if dedicated {
				v.Spec.Domain.CPU = &v1.CPU{Cores: 1, DedicatedCPUPlacement: true}
			}
		}
	}
	ctx := func(numaAware bool, grace ...string) func(*facts.Context) {
		return func(c *facts.Context) {
			c.Devices.Env = map[string]string{gpuEnv: "0000:81:00.1"}
			c.CPUSet = []uint{1}
			c.PCIPlacement = facts.PCIPlacement{NUMAAware: numaAware, GraceAliases: grace}
		}
	}
	convtest.Run(t, []convtest.Case{
		{Name: "dedicated CPUs and a PCI GPU without the gate are placed as always",
			VMI: gpu(true), Ctx: ctx(false), Contains: []string{`<alias name="ua-gpu-gpu1">`}},
		{Name: "the gate without dedicated CPUs changes nothing",
			VMI: gpu(false), Ctx: ctx(true), Contains: []string{`<alias name="ua-gpu-gpu1">`}},
		{Name: "the gate with dedicated CPUs but no PCI host device changes nothing",
			VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU = &v1.CPU{Cores: 1, DedicatedCPUPlacement: true} },
			Ctx: ctx(true)},
		{Name: "the gate with dedicated CPUs and a PCI GPU is refused, naming the gate and the device",
			VMI: gpu(true), Ctx: ctx(true),
			Err: "clusterConfig.PCINUMAAwareTopologyEnabled: NUMA-aware placement of the PCI host devices (ua-gpu-gpu1)"},
		{Name: "Grace host devices are refused, naming them",
			VMI: gpu(true), Ctx: ctx(false, "ua-gpu-gpu1"),
			Err: "options.graceHostDeviceAliases (ua-gpu-gpu1): Grace I/O virtualization is not supported"},
	})
}
