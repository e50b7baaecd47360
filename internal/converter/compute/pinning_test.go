package compute_test

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// hostCells builds a host topology: cells[i] lists cell i's cores, each
// core its hyper-threads.
func hostCells(cells ...[][]uint) []facts.NUMACell {
	var out []facts.NUMACell
	for id, cores := range cells {
		cell := facts.NUMACell{ID: uint(id)}
		for _, core := range cores {
			for _, t := range core {
				cell.CPUs = append(cell.CPUs, facts.HostCPU{ID: t, Siblings: core})
			}
		}
		out = append(out, cell)
	}
	return out
}

// pinned is the part of the domain dedicated CPUs shape, each element as
// the converter writes it ("" when absent).
type pinned struct {
	cputune, numatune, numa, backing, pmu string
}

var (
	cputuneRE  = regexp.MustCompile(`(?s)<cputune>.*?</cputune>`)
	numatuneRE = regexp.MustCompile(`(?s)<numatune>.*?</numatune>`)
	numaRE     = regexp.MustCompile(`(?s)<numa>.*?</numa>`)
	backingRE  = regexp.MustCompile(`(?s)<memoryBacking>.*?</memoryBacking>`)
	pmuRE      = regexp.MustCompile(`<pmu [^>]*>`)
)

// squeeze drops the indentation between elements, so a golden fits a line.
func squeeze(s string) string {
	return regexp.MustCompile(`>\s+<`).ReplaceAllString(strings.TrimSpace(s), "><")
}

func pinnedParts(doc string) pinned {
	f := func(re *regexp.Regexp) string { return squeeze(re.FindString(doc)) }
	return pinned{f(cputuneRE), f(numatuneRE), f(numaRE), f(backingRE), f(pmuRE)}
}

// TestCPUPinning is KubeVirt's dedicated CPU placement (v1.9.0
// AdjustDomainForTopologyAndCPUSet), from the VMI and the pod's CPU set
// and host topology alone: each row's pinning, NUMA and memory backing
// elements exactly, or the error naming the field.
func TestCPUPinning(t *testing.T) {
	dedicated := func(sockets, cores, threads uint32) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.CPU.Sockets, v.Spec.Domain.CPU.Cores, v.Spec.Domain.CPU.Threads = sockets, cores, threads
			v.Spec.Domain.CPU.DedicatedCPUPlacement = true
		}
	}
	and := func(fs ...func(*v1.VirtualMachineInstance)) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			for _, f := range fs {
				f(v)
			}
		}
	}
	isolate := func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.IsolateEmulatorThread = true }
	hugepages := func(size, guest string) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) {
			g := resource.MustParse(guest)
			v.Spec.Domain.Memory = &v1.Memory{Guest: &g, Hugepages: &v1.Hugepages{PageSize: size}}
		}
	}
	passthrough := func(v *v1.VirtualMachineInstance) {
		v.Spec.Domain.CPU.NUMA = &v1.NUMA{GuestMappingPassthrough: &v1.NUMAGuestMappingPassthrough{}}
	}
	realtime := func(mask string) func(*v1.VirtualMachineInstance) {
		return func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.Realtime = &v1.Realtime{Mask: mask} }
	}
	pod := func(cpus []uint, host []facts.NUMACell) func(*facts.Context) {
		return func(c *facts.Context) { c.CPUSet, c.HostNUMA = cpus, host }
	}
	// Two cells of two cores of two threads: 0/4 1/5 on cell 0, 2/6 3/7 on cell 1.
	smt := hostCells([][]uint{{0, 4}, {1, 5}}, [][]uint{{2, 6}, {3, 7}})
	for _, tc := range []struct {
		name      string
		emulation bool
		vmi       func(*v1.VirtualMachineInstance)
		ctx       func(*facts.Context)
		want      pinned
		err       string
	}{
		{name: "one vCPU on a pod of one CPU", vmi: dedicated(1, 1, 1), ctx: pod([]uint{1}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="1"></vcpupin></cputune>`}},
		{name: "in the pod's order, emulator thread on the next CPU", vmi: and(dedicated(2, 1, 1), isolate), ctx: pod([]uint{4, 5, 6}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="4"></vcpupin><vcpupin vcpu="1" cpuset="5"></vcpupin><emulatorpin cpuset="6"></emulatorpin></cputune>`}},
		{name: "a guest core's threads on one host core", vmi: dedicated(1, 2, 2), ctx: pod([]uint{1, 2, 5, 6}, smt),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="1"></vcpupin><vcpupin vcpu="1" cpuset="5"></vcpupin><vcpupin vcpu="2" cpuset="2"></vcpupin><vcpupin vcpu="3" cpuset="6"></vcpupin></cputune>`}},
		{name: "the emulator thread takes a loose thread before a whole core", vmi: and(dedicated(1, 1, 2), isolate), ctx: pod([]uint{0, 1, 4}, smt),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="0"></vcpupin><vcpupin vcpu="1" cpuset="4"></vcpupin><emulatorpin cpuset="1"></emulatorpin></cputune>`}},
		{name: "loose threads of two cells make a core without passthrough", vmi: dedicated(1, 1, 2), ctx: pod([]uint{1, 2}, smt),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="1"></vcpupin><vcpupin vcpu="1" cpuset="2"></vcpupin></cputune>`}},
		{name: "even parity takes a second emulator CPU", vmi: and(dedicated(2, 1, 1), isolate, func(v *v1.VirtualMachineInstance) {
			v.Annotations = map[string]string{v1.EmulatorThreadCompleteToEvenParity: ""}
		}), ctx: pod([]uint{0, 1, 2, 3}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="0"></vcpupin><vcpupin vcpu="1" cpuset="1"></vcpupin><emulatorpin cpuset="2,3"></emulatorpin></cputune>`}},
		{name: "only booted vCPUs are pinned", vmi: and(dedicated(1, 1, 1), func(v *v1.VirtualMachineInstance) { v.Spec.Domain.CPU.MaxSockets = 3 }), ctx: pod([]uint{3}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="3"></vcpupin></cputune>`}},
		{name: "I/O thread shares the vCPUs' CPUs", vmi: and(dedicated(3, 1, 1), func(v *v1.VirtualMachineInstance) {
			p := v1.IOThreadsPolicyShared
			v.Spec.Domain.IOThreadsPolicy = &p
		}), ctx: pod([]uint{4, 5, 6}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="4"></vcpupin><vcpupin vcpu="1" cpuset="5"></vcpupin><vcpupin vcpu="2" cpuset="6"></vcpupin><iothreadpin iothread="1" cpuset="4,5,6"></iothreadpin></cputune>`}},
		{name: "I/O thread on the isolated emulator CPU", vmi: and(dedicated(1, 1, 1), isolate, func(v *v1.VirtualMachineInstance) {
			p := v1.IOThreadsPolicyShared
			v.Spec.Domain.IOThreadsPolicy = &p
		}), ctx: pod([]uint{4, 5}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="4"></vcpupin><emulatorpin cpuset="5"></emulatorpin><iothreadpin iothread="1" cpuset="5"></iothreadpin></cputune>`}},
		{name: "realtime: PMU off, scheduling left to the handler", vmi: and(dedicated(2, 1, 1), realtime("0-1,^1")), ctx: pod([]uint{0, 1}, nil),
			want: pinned{cputune: `<cputune><vcpupin vcpu="0" cpuset="0"></vcpupin><vcpupin vcpu="1" cpuset="1"></vcpupin></cputune>`, pmu: `<pmu state="off">`}},
		{name: "NUMA passthrough mirrors the host cells, hugepages per node", vmi: and(dedicated(4, 1, 1), passthrough, hugepages("2Mi", "1026Mi")), ctx: pod([]uint{0, 1, 2, 3}, smt),
			want: pinned{
				cputune:  `<cputune><vcpupin vcpu="0" cpuset="0"></vcpupin><vcpupin vcpu="1" cpuset="1"></vcpupin><vcpupin vcpu="2" cpuset="2"></vcpupin><vcpupin vcpu="3" cpuset="3"></vcpupin></cputune>`,
				numatune: `<numatune><memory mode="strict" nodeset="0,1"></memory><memnode cellid="0" mode="strict" nodeset="0"></memnode><memnode cellid="1" mode="strict" nodeset="1"></memnode></numatune>`,
				numa:     `<numa><cell id="0" cpus="0,1" memory="538968064" unit="b"></cell><cell id="1" cpus="2,3" memory="536870912" unit="b"></cell></numa>`,
				backing:  `<memoryBacking><hugepages><page size="2048" unit="KiB"></page><page size="2048" unit="KiB" nodeset="0"></page><page size="2048" unit="KiB" nodeset="1"></page></hugepages><source type="memfd"></source><allocation mode="immediate"></allocation></memoryBacking>`,
			}},
		{name: "NUMA passthrough on one host cell, realtime: no shared pages", vmi: and(dedicated(2, 1, 1), passthrough, hugepages("1Gi", "2Gi"), realtime("")), ctx: pod([]uint{2, 3}, smt),
			want: pinned{
				cputune:  `<cputune><vcpupin vcpu="0" cpuset="2"></vcpupin><vcpupin vcpu="1" cpuset="3"></vcpupin></cputune>`,
				numatune: `<numatune><memory mode="strict" nodeset="1"></memory><memnode cellid="0" mode="strict" nodeset="1"></memnode></numatune>`,
				numa:     `<numa><cell id="0" cpus="0,1" memory="2147483648" unit="b"></cell></numa>`,
				backing:  `<memoryBacking><hugepages><page size="1048576" unit="KiB"></page><page size="1048576" unit="KiB" nodeset="0"></page></hugepages><nosharepages></nosharepages><source type="memfd"></source><allocation mode="immediate"></allocation></memoryBacking>`,
				pmu:      `<pmu state="off">`,
			}},

		{name: "no CPU set", vmi: dedicated(1, 1, 1), ctx: pod(nil, nil),
			err: "spec.domain.cpu.dedicatedCpuPlacement: 1 vCPUs do not fit the pod's CPU set (empty, 0 CPUs"},
		{name: "CPU set too small", vmi: dedicated(2, 1, 1), ctx: pod([]uint{1}, nil),
			err: "spec.domain.cpu.dedicatedCpuPlacement: 2 vCPUs do not fit the pod's CPU set (1, 1 CPUs"},
		{name: "no CPU left for the emulator thread", vmi: and(dedicated(1, 1, 1), isolate), ctx: pod([]uint{1}, nil),
			err: "spec.domain.cpu.isolateEmulatorThread: needs one host CPU more than the 1 the vCPUs take; the pod's CPU set (1) has 1"},
		{name: "passthrough refuses a core across cells", vmi: and(dedicated(1, 1, 2), passthrough, hugepages("2Mi", "1Gi")), ctx: pod([]uint{1, 2}, smt),
			err: "spec.domain.cpu.numa.guestMappingPassthrough: 2 vCPUs do not fit the pod's CPU set (1,2, 2 CPUs: the cgroup's cpuset, which the CPU manager sets): 1 guest core(s) of 2 thread(s) do not fit without one core's threads crossing host NUMA cells"},
		{name: "passthrough without hugepages", vmi: and(dedicated(1, 1, 1), passthrough), ctx: pod([]uint{0}, smt),
			err: "spec.domain.cpu.numa.guestMappingPassthrough: requires spec.domain.memory.hugepages"},
		{name: "passthrough with less than a page per cell", vmi: and(dedicated(2, 1, 1), passthrough, hugepages("1Gi", "1Gi")), ctx: pod([]uint{0, 2}, smt),
			err: "less than one 1Gi hugepage for each of the 2 host NUMA cells"},
		{name: "bad realtime mask", vmi: and(dedicated(1, 1, 1), realtime("0-x")), ctx: pod([]uint{0}, nil),
			err: `spec.domain.cpu.realtime.mask: "0-x" in "0-x" is not a vCPU`},
		{name: "realtime without dedicated CPUs", vmi: realtime(""), err: "spec.domain.cpu.realtime: requires dedicatedCpuPlacement"},
		{name: "passthrough without dedicated CPUs", vmi: passthrough, err: "spec.domain.cpu.numa.guestMappingPassthrough: requires dedicatedCpuPlacement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := convtest.VMI()
			if tc.vmi != nil {
				tc.vmi(v)
			}
			c := convtest.Context()
			c.Emulation = tc.emulation
			if tc.ctx != nil {
				tc.ctx(c)
			}
			dom, err := converter.Convert(v, c)
			if !convtest.CheckErr(t, err, tc.err) {
				return
			}
			doc := convtest.Validate(t, dom)
			if got := pinnedParts(doc); got != tc.want {
				t.Errorf("got\n  %+v\nwant\n  %+v", got, tc.want)
			}
			if hint := strings.Contains(doc, `<hint-dedicated state="on">`); !hint {
				t.Errorf("no <hint-dedicated state=\"on\"> under KVM on amd64")
			}
		})
	}
}
