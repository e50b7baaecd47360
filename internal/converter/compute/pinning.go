package compute

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// CPUPinning places a VMI with dedicatedCpuPlacement on the pod's CPUs
// (facts.Context.CPUSet) as KubeVirt's AdjustDomainForTopologyAndCPUSet
// does: every booted vCPU pinned to one host CPU, a guest core's threads on
// one host core where the host's topology allows, the emulator thread on a
// CPU of its own with isolateEmulatorThread, I/O threads pinned, PMU off
// for realtime, and with NUMA guestMappingPassthrough the guest's NUMA
// cells mirroring the host cells its vCPUs landed on, backed by hugepages
// of those host nodes. It runs after Memory and MemoryBacking, whose NUMA
// cell and hugepages NUMA passthrough replaces and extends.
type CPUPinning struct{ Ctx *facts.Context }

func (p CPUPinning) Configure(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	spec := vmi.Spec.Domain.CPU
	if spec == nil || !spec.DedicatedCPUPlacement {
		switch {
		case spec != nil && spec.Realtime != nil:
			return fmt.Errorf("spec.domain.cpu.realtime: requires dedicatedCpuPlacement")
		case spec != nil && spec.NUMA != nil && spec.NUMA.GuestMappingPassthrough != nil:
			return fmt.Errorf("spec.domain.cpu.numa.guestMappingPassthrough: requires dedicatedCpuPlacement")
		}
		return nil
	}
	sockets, cores, threads := facts.Topology(vmi)
	strict := spec.NUMA != nil && spec.NUMA.GuestMappingPassthrough != nil
	pool := newCPUPool(p.cells(), p.Ctx.CPUSet, int(threads))
	pinned, err := pool.fitCores(int(sockets*cores), !strict)
	if err != nil {
		return p.fitError(vmi, strict, err)
	}
	tune := &libvirtxml.DomainCPUTune{}
	for i, cpu := range pinned {
		tune.VCPUPin = append(tune.VCPUPin, libvirtxml.DomainCPUTuneVCPUPin{VCPU: uint(i), CPUSet: strconv.FormatUint(uint64(cpu), 10)})
	}
	dom.CPUTune = tune
	if arch(vmi, p.Ctx) == "amd64" && !p.Ctx.Emulation {
		f := features(dom)
		if f.KVM == nil {
			f.KVM = &libvirtxml.DomainFeatureKVM{}
		}
		f.KVM.HintDedicated = &libvirtxml.DomainFeatureState{State: "on"}
	}
	emulator := ""
	if spec.IsolateEmulatorThread {
		if emulator, err = p.emulatorPin(vmi, pool, len(pinned)); err != nil {
			return err
		}
		tune.EmulatorPin = &libvirtxml.DomainCPUTuneEmulatorPin{CPUSet: emulator}
	}
	p.pinIOThreads(dom, emulator, len(pinned))
	if spec.Realtime != nil {
		if _, err := parseVCPUMask(spec.Realtime.Mask); err != nil {
			return fmt.Errorf("spec.domain.cpu.realtime.mask: %w", err)
		}
		// The vCPU threads' FIFO scheduling is virt-handler's part (vlctl's
		// standalone): KubeVirt leaves it out of the domain so that a launcher
		// without CAP_SYS_NICE can still start the guest.
		features(dom).PMU = &libvirtxml.DomainFeatureState{State: "off"}
	}
	if strict {
		return p.numaPassthrough(vmi, dom)
	}
	return nil
}

// cells is the host topology the pool draws from: the host's NUMA cells,
// or, when nothing is known of them, cell 0 with each CPU of the pod's set
// a core of its own.
func (p CPUPinning) cells() []facts.NUMACell {
	if len(p.Ctx.HostNUMA) > 0 {
		return p.Ctx.HostNUMA
	}
	cell := facts.NUMACell{}
	for _, c := range p.Ctx.CPUSet {
		cell.CPUs = append(cell.CPUs, facts.HostCPU{ID: c})
	}
	return []facts.NUMACell{cell}
}

func (p CPUPinning) fitError(vmi *v1.VirtualMachineInstance, strict bool, err error) error {
	field := "spec.domain.cpu.dedicatedCpuPlacement"
	if strict {
		field = "spec.domain.cpu.numa.guestMappingPassthrough"
	}
	return fmt.Errorf("%s: %v vCPUs do not fit the pod's CPU set (%s, %d CPUs: the cgroup's cpuset, which the CPU manager sets): %w",
		field, vcpuCount(vmi), cpuList(p.Ctx.CPUSet), len(p.Ctx.CPUSet), err)
}

// emulatorPin takes the emulator thread's CPU from what the vCPUs left,
// and a second one when the annotation asks to complete an even vCPU count
// to an even number of pinned CPUs.
func (p CPUPinning) emulatorPin(vmi *v1.VirtualMachineInstance, pool *cpuPool, vcpus int) (string, error) {
	first, ok := pool.fitThread()
	if !ok {
		return "", fmt.Errorf("spec.domain.cpu.isolateEmulatorThread: needs one host CPU more than the %d the vCPUs take; the pod's CPU set (%s) has %d",
			vcpus, cpuList(p.Ctx.CPUSet), len(p.Ctx.CPUSet))
	}
	set := []uint{first}
	if _, even := vmi.Annotations[v1.EmulatorThreadCompleteToEvenParity]; even && vcpuCount(vmi)%2 == 0 {
		second, ok := pool.fitThread()
		if !ok {
			return "", fmt.Errorf("spec.domain.cpu.isolateEmulatorThread: annotation %s needs a second host CPU for the emulator thread; the pod's CPU set (%s) has %d",
				v1.EmulatorThreadCompleteToEvenParity, cpuList(p.Ctx.CPUSet), len(p.Ctx.CPUSet))
		}
		set = append(set, second)
	}
	parts := make([]string, len(set))
	for i, c := range set {
		parts[i] = strconv.FormatUint(uint64(c), 10)
	}
	return strings.Join(parts, ","), nil
}

// pinIOThreads pins the domain's I/O threads as KubeVirt does: the first
// one on the emulator thread's CPUs when the emulator thread is isolated;
// otherwise, with at least as many I/O threads as vCPUs, thread t on the
// pod's CPU t mod vCPUs, and with fewer, each thread on its share of the
// vCPUs' CPUs in turn (3 threads on 8 CPUs: 3, 3 and 2).
func (p CPUPinning) pinIOThreads(dom *libvirtxml.Domain, emulator string, vcpus int) {
	n := int(dom.IOThreads)
	if n == 0 || vcpus == 0 {
		return
	}
	set := p.Ctx.CPUSet
	pin := func(t int, cpus []uint) {
		dom.CPUTune.IOThreadPin = append(dom.CPUTune.IOThreadPin, libvirtxml.DomainCPUTuneIOThreadPin{IOThread: uint(t), CPUSet: cpuCommaList(cpus)})
	}
	switch {
	case emulator != "":
		dom.CPUTune.IOThreadPin = append(dom.CPUTune.IOThreadPin, libvirtxml.DomainCPUTuneIOThreadPin{IOThread: 1, CPUSet: emulator})
	case n >= vcpus:
		for t := 1; t <= n; t++ {
			pin(t, set[t%vcpus:t%vcpus+1])
		}
	default:
		next := 0
		for t := 1; t <= n; t++ {
			size := vcpus / n
			if t <= vcpus%n {
				size++
			}
			pin(t, set[next:next+size])
			next += size
		}
	}
}

// numaPassthrough gives the guest one NUMA cell per host cell its vCPUs
// were pinned on (in host order), each with those vCPUs, an equal share
// of the memory in whole hugepages (the first cells one page more when the
// pages do not divide evenly) bound strictly to its host node, and the
// hugepages allocated at start.
func (p CPUPinning) numaPassthrough(vmi *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	const field = "spec.domain.cpu.numa.guestMappingPassthrough"
	if len(p.Ctx.HostNUMA) == 0 {
		return nil // no host topology known: the guest keeps its synthetic cell, as KubeVirt's
	}
	cellOf := map[uint]uint{}
	for _, c := range p.Ctx.HostNUMA {
		for _, cpu := range c.CPUs {
			cellOf[cpu.ID] = c.ID
		}
	}
	vcpusOn := map[uint][]string{}
	for _, pin := range dom.CPUTune.VCPUPin {
		host, _ := strconv.ParseUint(pin.CPUSet, 10, 32)
		cell, ok := cellOf[uint(host)]
		if !ok {
			return fmt.Errorf("%s: vCPU %d is pinned to host CPU %s, which no host NUMA cell holds", field, pin.VCPU, pin.CPUSet)
		}
		vcpusOn[cell] = append(vcpusOn[cell], strconv.FormatUint(uint64(pin.VCPU), 10))
	}
	mem := vmi.Spec.Domain.Memory
	if mem == nil || mem.Hugepages == nil || dom.MemoryBacking == nil || dom.MemoryBacking.MemoryHugePages == nil {
		return fmt.Errorf("%s: requires spec.domain.memory.hugepages (each guest cell's memory comes from its host node's hugepages)", field)
	}
	page := uint64(dom.MemoryBacking.MemoryHugePages.Hugepages[0].Size) << 10
	total := uint64(dom.Memory.Value)
	var used []facts.NUMACell
	for _, c := range p.Ctx.HostNUMA {
		if _, ok := vcpusOn[c.ID]; ok {
			used = append(used, c)
		}
	}
	cells := uint64(len(used))
	switch {
	case total < cells*page:
		return fmt.Errorf("%s: %d bytes of guest memory is less than one %s hugepage for each of the %d host NUMA cells the vCPUs are on", field, total, mem.Hugepages.PageSize, cells)
	case total%page != 0:
		return fmt.Errorf("%s: %d bytes of guest memory is not a whole number of %s hugepages", field, total, mem.Hugepages.PageSize)
	}
	extra := total % (page * cells) / page
	share := (total - extra*page) / cells
	var nodes []string
	numa := &libvirtxml.DomainNuma{}
	tune := &libvirtxml.DomainNUMATune{}
	for i, c := range used {
		id := strconv.FormatUint(uint64(c.ID), 10)
		nodes = append(nodes, id)
		size := share
		if uint64(i) < extra {
			size += page
		}
		numa.Cell = append(numa.Cell, libvirtxml.DomainCell{ID: uintPtr(uint(i)), CPUs: strings.Join(vcpusOn[c.ID], ","), Memory: uint(size), Unit: "b"})
		tune.MemNodes = append(tune.MemNodes, libvirtxml.DomainNUMATuneMemNode{CellID: uint(i), Mode: "strict", Nodeset: id})
		hp := dom.MemoryBacking.MemoryHugePages
		hp.Hugepages = append(hp.Hugepages, libvirtxml.DomainMemoryHugepage{Size: uint(page >> 10), Unit: "KiB", Nodeset: strconv.Itoa(i)})
	}
	tune.Memory = &libvirtxml.DomainNUMATuneMemory{Mode: "strict", Nodeset: strings.Join(nodes, ",")}
	dom.CPU.Numa = numa
	dom.NUMATune = tune
	dom.MemoryBacking.MemoryAllocation = &libvirtxml.DomainMemoryAllocation{Mode: "immediate"}
	if vmi.Spec.Domain.CPU.Realtime != nil {
		dom.MemoryBacking.MemoryNosharepages = &libvirtxml.DomainMemoryNosharepages{}
	}
	return nil
}

// vcpuCount is sockets × cores × threads of the booted topology.
func vcpuCount(vmi *v1.VirtualMachineInstance) uint64 {
	s, c, t := facts.Topology(vmi)
	return uint64(s) * uint64(c) * uint64(t)
}

func cpuCommaList(cpus []uint) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.FormatUint(uint64(c), 10)
	}
	return strings.Join(parts, ",")
}

func cpuList(cpus []uint) string {
	if len(cpus) == 0 {
		return "empty"
	}
	return cpuCommaList(cpus)
}

var (
	maskRange  = regexp.MustCompile(`^(\d+)-(\d+)$`)
	maskSingle = regexp.MustCompile(`^(\d+)$`)
	maskNot    = regexp.MustCompile(`^\^(\d+)$`)
)

// parseVCPUMask reads realtime.mask as KubeVirt (and libvirt) read it:
// "0-3,^2,5"; a vCPU a range or number names is in unless a ^ excludes it.
// An empty mask means every vCPU (the nil map).
func parseVCPUMask(mask string) (map[uint]bool, error) {
	if mask == "" {
		return nil, nil
	}
	in := map[uint]bool{}
	for _, item := range strings.Split(mask, ",") {
		m := strings.TrimSpace(item)
		if g := maskRange.FindStringSubmatch(m); g != nil {
			lo, err1 := strconv.ParseUint(g[1], 10, 16)
			hi, err2 := strconv.ParseUint(g[2], 10, 16)
			if err1 != nil || err2 != nil || lo > hi {
				return nil, fmt.Errorf("%q is not a vCPU range", m)
			}
			for id := lo; id <= hi; id++ {
				if _, set := in[uint(id)]; !set {
					in[uint(id)] = true
				}
			}
			continue
		}
		if g := maskSingle.FindStringSubmatch(m); g != nil {
			id, err := strconv.ParseUint(g[1], 10, 16)
			if err != nil {
				return nil, fmt.Errorf("%q is not a vCPU number", m)
			}
			if _, set := in[uint(id)]; !set {
				in[uint(id)] = true
			}
			continue
		}
		if g := maskNot.FindStringSubmatch(m); g != nil {
			id, err := strconv.ParseUint(g[1], 10, 16)
			if err != nil {
				return nil, fmt.Errorf("%q is not a vCPU number", m)
			}
			in[uint(id)] = false
			continue
		}
		return nil, fmt.Errorf("%q in %q is not a vCPU, a range a-b or an exclusion ^n", item, mask)
	}
	return in, nil
}
