package testguest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// BIOSDiskTools are the programs BIOSDisk runs (Debian's dosfstools,
// mtools and syslinux).
func BIOSDiskTools() []string { return []string{"mkfs.vfat", "mcopy", "syslinux"} }

// BIOSDiskSize is the size of the FAT file system BIOSDisk makes: the
// kernel and the initramfs with room to spare.
const BIOSDiskSize = 48 << 20

// BIOSDisk writes to path a qcow2 disk image that a PC BIOS (SeaBIOS)
// boots by itself, as it boots a distribution's disk image: a FAT file
// system over the whole disk (no partition table) with SYSLINUX's boot
// sector and loader, EFIKernel (the bzImage: SYSLINUX cannot start the PVH
// vmlinux), Initrd and a syslinux.cfg that starts the kernel at once with
// DefaultCmdline and opts. The guest has no root disk; with
// OptLogin it stands in for KubeVirt's alpine, cirros or Fedora test image.
// With OptTooling the disk's initramfs is Initrd followed by Tooling.
func (g *Guest) BIOSDisk(ctx context.Context, path string, opts ...string) error {
	for _, t := range BIOSDiskTools() {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("BIOS disk: %s not found (install dosfstools, mtools and syslinux): %w", t, err)
		}
	}
	dir, err := os.MkdirTemp("", "vl-biosdisk-")
	if err != nil {
		return fmt.Errorf("BIOS disk: %w", err)
	}
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "disk.img")
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		err = f.Truncate(BIOSDiskSize)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("BIOS disk: %w", err)
	}
	// With OptTooling the kernel unpacks the tooling archive after the
	// base one: one file holding both (the kernel reads concatenated
	// archives), so that the loader needs no list of initrds.
	initrd := g.Initrd
	if slices.Contains(opts, OptTooling) {
		initrd = filepath.Join(dir, "initrd.img")
		if err := concatFiles(initrd, g.Initrd, g.Tooling); err != nil {
			return fmt.Errorf("BIOS disk: %w", err)
		}
	}
	cfg := filepath.Join(dir, "syslinux.cfg")
	cmdline := strings.Join(append([]string{DefaultCmdline}, opts...), " ")
	// SERIAL: the loader's own messages go to the serial console too;
	// TIMEOUT 0 with PROMPT 0 boots the default entry without waiting.
	conf := "SERIAL 0 115200\nPROMPT 0\nTIMEOUT 0\nDEFAULT vl\nLABEL vl\n  LINUX /vmlinuz\n  INITRD /initrd.img\n  APPEND " + cmdline + "\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("BIOS disk: %w", err)
	}
	// mtools reads ~/.mtoolsrc and MTOOLSRC: a clean environment, so that
	// nothing of the caller's changes how the image is written.
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "MTOOLS_SKIP_CHECK=1", "HOME=" + dir}
	steps := [][]string{
		{"mkfs.vfat", "-n", "VLBOOT", img},
		{"mcopy", "-i", img, g.EFIKernel, "::vmlinuz"},
		{"mcopy", "-i", img, initrd, "::initrd.img"},
		{"mcopy", "-i", img, cfg, "::syslinux.cfg"},
		{"syslinux", "--install", img},
		// Written beside path, then renamed over it: never half a disk.
		{"qemu-img", "convert", "-f", "raw", "-O", "qcow2", img, path + ".tmp"},
	}
	for _, s := range steps {
		cmd := exec.CommandContext(ctx, s[0], s[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(path + ".tmp")
			return fmt.Errorf("BIOS disk: %s: %v: %s", s[0], err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		os.Remove(path + ".tmp")
		return fmt.Errorf("BIOS disk: %w", err)
	}
	return nil
}

// concatFiles writes the files srcs one after the other to dst.
func concatFiles(dst string, srcs ...string) error {
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	for _, src := range srcs {
		in, err := os.Open(src)
		if err != nil {
			out.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			out.Close()
			return fmt.Errorf("%s: %w", src, err)
		}
	}
	return out.Close()
}
