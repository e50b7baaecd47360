package compute

import (
	"fmt"

	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// cpuPool hands out the pod's host CPUs the way KubeVirt's vCPU pool does:
// per host NUMA cell, the pod's threads of each host core, split into
// whole cores (at least as many of the core's threads in the pod as a guest
// core has threads) and loose threads (what is left of the other cores).
type cpuPool struct {
	cells     []*poolCell
	perCore   int // guest threads per guest core
	available int // the pod's CPUs
}

type poolCell struct {
	whole [][]uint // host cores that can still take a guest core
	loose []uint   // threads of host cores that cannot
}

func newCPUPool(host []facts.NUMACell, podCPUs []uint, perCore int) *cpuPool {
	inPod := map[uint]bool{}
	for _, c := range podCPUs {
		inPod[c] = true
	}
	seen := map[uint]bool{}
	p := &cpuPool{perCore: perCore, available: len(podCPUs)}
	for _, hc := range host {
		cell := &poolCell{}
		for _, cpu := range hc.CPUs {
			if seen[cpu.ID] {
				continue
			}
			members := cpu.Siblings
			if len(members) == 0 {
				members = []uint{cpu.ID}
			}
			var core []uint
			for _, t := range members {
				seen[t] = true
				if inPod[t] {
					core = append(core, t)
				}
			}
			if len(core) >= perCore {
				cell.whole = append(cell.whole, core)
			} else {
				cell.loose = append(cell.loose, core...)
			}
		}
		p.cells = append(p.cells, cell)
	}
	return p
}

// fitCores places n guest cores: first on whole host cores, then on loose
// threads of one cell, and, when crossing is allowed (no NUMA passthrough),
// on loose threads wherever they are. It returns the host CPU of each vCPU
// in order.
func (p *cpuPool) fitCores(n int, crossing bool) ([]uint, error) {
	var out []uint
	left := n
	for _, take := range []func(*poolCell) []uint{p.takeWholeCore, p.takeLooseCore} {
		for _, c := range p.cells {
			for left > 0 {
				got := take(c)
				if got == nil {
					break
				}
				out = append(out, got...)
				left--
			}
		}
	}
	if left > 0 && crossing {
		threads := left * p.perCore
		for _, c := range p.cells {
			k := min(threads, len(c.loose))
			out = append(out, c.loose[:k]...)
			c.loose = c.loose[k:]
			threads -= k
		}
		left = (threads + p.perCore - 1) / p.perCore
	}
	switch {
	case left == 0:
		return out, nil
	case crossing || p.available < n*p.perCore:
		return nil, fmt.Errorf("not enough host CPUs: %d guest core(s) of %d thread(s) left without one", left, p.perCore)
	default:
		return nil, fmt.Errorf("%d guest core(s) of %d thread(s) do not fit without one core's threads crossing host NUMA cells", left, p.perCore)
	}
}

// takeWholeCore takes a guest core's threads from the cell's first whole
// host core.
func (p *cpuPool) takeWholeCore(c *poolCell) []uint {
	if len(c.whole) == 0 {
		return nil
	}
	got := c.whole[0][:p.perCore]
	p.shrink(c, p.perCore)
	return got
}

// takeLooseCore takes a guest core's threads from the cell's loose
// threads, when it has that many.
func (p *cpuPool) takeLooseCore(c *poolCell) []uint {
	if len(c.loose) < p.perCore {
		return nil
	}
	got := c.loose[:p.perCore]
	c.loose = c.loose[p.perCore:]
	return got
}

// fitThread takes one more CPU (for the emulator thread): a loose thread
// first, else one from a whole core, from the first cell that has any.
func (p *cpuPool) fitThread() (uint, bool) {
	for _, c := range p.cells {
		if len(c.loose) > 0 {
			t := c.loose[0]
			c.loose = c.loose[1:]
			return t, true
		}
		if len(c.whole) > 0 {
			t := c.whole[0][0]
			p.shrink(c, 1)
			return t, true
		}
	}
	return 0, false
}

// shrink drops the first k threads of the cell's first whole core; a rest
// too small for a guest core becomes loose.
func (p *cpuPool) shrink(c *poolCell, k int) {
	rest := c.whole[0][k:]
	if len(rest) >= p.perCore {
		c.whole[0] = rest
		return
	}
	c.whole = c.whole[1:]
	c.loose = append(c.loose, rest...)
}
