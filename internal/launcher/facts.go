package launcher

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/kvm"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// hypervisor decides between KVM and TCG: forced emulation, else KVM when
// /dev/kvm can be opened, else emulation when allowed, else an error that
// Sync returns.
func hypervisor(o *launcherflags.Options) (emulation bool, err error) {
	if o.ForceEmulation {
		return true, nil
	}
	kerr := kvm.Usable()
	if kerr == nil {
		return false, nil
	}
	if o.AllowEmulation {
		return true, nil
	}
	return false, fmt.Errorf("KVM is not available (%v) and --allow-emulation is not set", kerr)
}

// efiFiles finds the EFI firmware: --ovmf-path first (KubeVirt's image
// uses Fedora's names), then Debian's /usr/share/OVMF (the _4M builds).
func efiFiles(ovmfPath string) facts.EFI {
	dirs := []string{ovmfPath, "/usr/share/OVMF", "/usr/share/edk2/ovmf"}
	find := func(names ...string) string {
		for _, d := range dirs {
			for _, n := range names {
				p := filepath.Join(d, n)
				if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
					return p
				}
			}
		}
		return ""
	}
	return facts.EFI{
		Code:       find("OVMF_CODE_4M.fd", "OVMF_CODE.fd"),
		Vars:       find("OVMF_VARS_4M.fd", "OVMF_VARS.fd"),
		SecureCode: find("OVMF_CODE_4M.secboot.fd", "OVMF_CODE.secboot.fd"),
		SecureVars: find("OVMF_VARS_4M.ms.fd", "OVMF_VARS.secboot.fd"),
	}
}

// podCPUs reads, once at start as KubeVirt's launcher does, the CPUs the
// pod may use (its cgroup's CPU set, which a CPU manager narrows to the
// dedicated CPUs) and the host's NUMA topology. A launcher that cannot read
// them still serves: only a VMI with dedicated CPUs needs them, and its
// Sync then fails saying the set is empty.
func podCPUs(log *slog.Logger) ([]uint, []facts.NUMACell) {
	sys := hostcpu.Sys{Root: "/"}
	cpus, file, err := sys.OwnCPUSet("self")
	if err != nil {
		log.Warn("cannot read the pod's CPU set: dedicated CPUs cannot be placed", "file", file, "error", err)
		return nil, nil
	}
	cells, err := sys.NUMA()
	if err != nil {
		log.Warn("cannot read the host's NUMA topology: each pod CPU counts as a core of its own in one cell", "error", err)
	}
	log.Info("pod CPU set", "cpus", hostcpu.FormatList(cpus), "file", file, "numaCells", len(cells))
	return cpus, cells
}

// baseFacts returns the launcher's own facts for the converter.
func baseFacts(l layout.Layout, emulation, nonRoot bool, efi facts.EFI, cpus []uint, numa []facts.NUMACell) func() *facts.Context {
	return func() *facts.Context {
		c := facts.Default(l)
		c.Arch = runtime.GOARCH
		c.Emulation = emulation
		c.NonRoot = nonRoot
		c.EFI = efi
		c.CPUSet = slices.Clone(cpus)
		c.HostNUMA = numa
		c.FreeHugepages = freeHugepages("/sys/kernel/mm/hugepages")
		return c
	}
}

// freeHugepages reads, at each conversion (the pool changes), how many
// hugepages of each size the host has free: dir holds one
// hugepages-<size>kB directory per size. Nil when it cannot be read, which
// leaves the check to QEMU.
func freeHugepages(dir string) map[uint64]uint64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[uint64]uint64{}
	for _, e := range ents {
		kb, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		size, err1 := strconv.ParseUint(strings.TrimSuffix(kb, "kB"), 10, 64)
		b, err2 := os.ReadFile(filepath.Join(dir, e.Name(), "free_hugepages"))
		free, err3 := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil
		}
		out[size<<10] = free
	}
	return out
}
