package testguest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// requiredModules are what the init needs on the machines libvirt and the
// tests make: virtio (PCI) disks, NICs and consoles, SATA disks and CD-ROMs
// (AHCI on q35, PIIX IDE on pc), virtio-scsi, ISO 9660 for cloud-init, ext4
// for the root disk (crc32c for its checksums) and the ACPI power button
// (with evdev, through which the init reads it).
var requiredModules = []string{
	"virtio_pci", "virtio_blk", "virtio_net", "virtio_console", "virtio_scsi",
	"ahci", "sd_mod", "sr_mod", "isofs", "crc32c_generic", "ext4", "evdev", "button",
}

// optionalModules are loaded when the kernel has them as modules (Debian
// builds the TPM drivers in; efivarfs, for the EFI variables, and
// virtio_mem, for memory hotplug, are modules; pvpanic_mmio drives the ISA
// panic device, pvpanic_pci the PCI one, qemu_fw_cfg shows QEMU's fw_cfg
// entries in /sys/firmware/qemu_fw_cfg, virtiofs mounts the VMI's
// virtiofs filesystems: mount -t virtiofs <filesystem name> DIR;
// i6300esb drives the VMI's watchdog device, /dev/watchdog).
var optionalModules = []string{
	"ata_piix", "e1000", "e1000e", "virtio_rng", "virtio_balloon", "virtio_input",
	"tpm_tis", "tpm_crb", "efivarfs", "virtio_mem", "pvpanic_mmio", "pvpanic_pci", "qemu_fw_cfg", "virtiofs",
	"i6300esb",
}

// toolingModules are the tooling initramfs' modules (OptTooling), loaded
// after the base ones: vfat and the code page and character set it mounts
// with by default (437, ascii), for the Fedora stand-in's boot disk, and
// loop, for its data image (ToolingDataName), which it mounts as the real
// image has its disk mounted.
var toolingModules = []string{"vfat", "nls_cp437", "nls_ascii", "loop"}

// modName is a module's name as modprobe spells it.
func modName(path string) string {
	b := filepath.Base(path)
	b = strings.TrimSuffix(b, ".ko")
	return strings.ReplaceAll(b, "-", "_")
}

// moduleOrder resolves the base initramfs' modules (requiredModules,
// optionalModules) and their dependencies from modules.dep into the order
// insmod must load them (dependencies first), as paths relative to the
// kernel's module directory. Built-in modules are skipped; a required
// module that is neither there nor built in is an error.
func moduleOrder(modDir string) ([]string, error) {
	return resolveModules(modDir, requiredModules, optionalModules, nil)
}

// toolingModuleOrder resolves toolingModules as moduleOrder does (all
// required), leaving out those base, the base initramfs' order, has.
func toolingModuleOrder(modDir string, base []string) ([]string, error) {
	return resolveModules(modDir, toolingModules, nil, base)
}

// resolveModules is moduleOrder's resolution of required and optional
// modules, skipping the paths in have.
func resolveModules(modDir string, required, optional, have []string) ([]string, error) {
	deps := map[string][]string{} // module path -> dependency paths
	byName := map[string]string{} // module name -> path
	f, err := os.Open(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[modName(mod)] = mod
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(l)] = true
		}
	}

	var order []string
	seen := map[string]bool{}
	for _, p := range have {
		seen[p] = true
	}
	var visit func(path string) error
	visit = func(path string) error {
		if seen[path] {
			return nil
		}
		seen[path] = true
		if !strings.HasSuffix(path, ".ko") {
			return fmt.Errorf("module %s is compressed; busybox insmod needs plain .ko files", path)
		}
		// modules.dep lists the whole closure; visiting it last to first
		// loads the deepest dependencies first.
		d := deps[path]
		for i := len(d) - 1; i >= 0; i-- {
			if err := visit(d[i]); err != nil {
				return err
			}
		}
		order = append(order, path)
		return nil
	}
	for _, m := range required {
		p, ok := byName[m]
		switch {
		case ok:
			if err := visit(p); err != nil {
				return nil, err
			}
		case builtin[m]:
		default:
			return nil, fmt.Errorf("kernel module %s: neither in %s/modules.dep nor built in", m, modDir)
		}
	}
	for _, m := range optional {
		if p, ok := byName[m]; ok {
			if err := visit(p); err != nil {
				return nil, err
			}
		}
	}
	return order, nil
}
