package testguest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EFIDisk writes to path a qcow2 disk image that boots the guest by EFI
// firmware alone, as a cloud image does (no kernelBoot): a stand-in for
// one where nothing may be downloaded. It holds an MBR-partitioned FAT
// file system (QEMU's vvfat of a directory, converted by qemu-img, which
// must be on PATH) with EFIKernel, Initrd and a startup.nsh: OVMF, finding
// no boot loader on the disk, falls back to its UEFI shell, which after 5
// seconds runs that script, starting the kernel with DefaultCmdline and
// opts. The guest has no root disk (MarkerNoRoot); it reads cloud-init's
// user-data as under kernelBoot.
func (g *Guest) EFIDisk(ctx context.Context, path string, opts ...string) error {
	dir, err := os.MkdirTemp("", "vl-efidisk-")
	if err != nil {
		return fmt.Errorf("EFI disk: %w", err)
	}
	defer os.RemoveAll(dir)
	for _, f := range []struct{ src, name string }{{g.EFIKernel, EFIKernelName}, {g.Initrd, "initrd.img"}} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return fmt.Errorf("EFI disk: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b, 0o644); err != nil {
			return fmt.Errorf("EFI disk: %w", err)
		}
	}
	cmdline := strings.Join(append([]string{DefaultCmdline}, opts...), " ")
	script := "fs0:\r\n\\" + EFIKernelName + " initrd=\\initrd.img " + cmdline + "\r\n"
	if err := os.WriteFile(filepath.Join(dir, "startup.nsh"), []byte(script), 0o644); err != nil {
		return fmt.Errorf("EFI disk: %w", err)
	}
	// Written beside path, then renamed over it: never half a disk.
	tmp := path + ".tmp"
	out, err := exec.CommandContext(ctx, "qemu-img", "convert", "-f", "vvfat", "-O", "qcow2", "fat:"+dir, tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("EFI disk: qemu-img convert: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("EFI disk: %w", err)
	}
	return nil
}
