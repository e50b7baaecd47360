package testguest

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// systemctlScript is the Fedora stand-in's systemctl, for the one service
// KubeVirt's tests stop and start in that image: qemu-guest-agent.
//
//go:embed files/systemctl
var systemctlScript []byte

// dhclientScript is the Fedora stand-in's dhclient: ISC's with Fedora's
// --request-options.
//
//go:embed files/dhclient
var dhclientScript []byte

// OptTooling gives a BIOSDisk the test tooling of KubeVirt's Fedora image
// (ToolingPrograms, the systemctl and dhclient scripts, the agent service's
// settings, and the modules and data image the Fedora stand-in mounts):
// BIOSDisk loads the Tooling initramfs after Initrd. On the kernel command line the
// option only marks the disk; the init does nothing with it.
const OptTooling = "vl.tooling=1"

// ToolingName is the file name of Guest.Tooling in KernelDir.
const ToolingName = "tooling.img"

// ToolingDataName is the tooling's ext4 image (in the guest below
// /usr/lib/vl-tooling), which the Fedora stand-in mounts at /srv on a loop
// device: a file system its guest agent can freeze. ToolingDataSize is its
// size.
const (
	ToolingDataName = "data.img"
	ToolingDataSize = 4 << 20
)

// ToolingPrograms are the host programs (Debian's, with the libraries they
// link) in the tooling initramfs, by their path in the guest: what
// KubeVirt's functional tests run in their Fedora image beyond busybox,
// qemu-ga and dropbear. None is a busybox applet: the tooling archive is
// unpacked over the initramfs, where an applet's name is a link to
// busybox, and a file written there would overwrite busybox itself.
var ToolingPrograms = map[string]string{
	// The migration specs' load (runStressTest: stress-ng --vm 1
	// --vm-bytes N --vm-keep), which slows a migration down.
	"/bin/stress-ng": "/usr/bin/stress-ng",
	// The SMBIOS and chassis specs: dmidecode -s system-family etc.
	"/bin/dmidecode": "/usr/sbin/dmidecode",
	// The hidden-KVM spec runs it at this path (virt-what's).
	"/usr/libexec/virt-what-cpuid-helper": "/usr/libexec/virt-what-cpuid-helper",
	// util-linux's, for the storage and postcopy specs; and its blkid,
	// whose -s LABEL -o value the config-disk spec runs (this busybox has
	// no blkid applet).
	"/bin/lsblk": "/usr/bin/lsblk",
	"/bin/blkid": "/usr/sbin/blkid",
	// tpm2-tools' one program, which does what its name says
	// (ToolingLinks: tpm2_pcrread is tpm2 pcrread): the TPM specs read and
	// extend PCRs, seal, and write NV indices.
	"/bin/tpm2": "/usr/bin/tpm2",
	// ISC's DHCP client, which the DHCP-options spec runs with env as its
	// script to see the options' values (busybox has udhcpc only); it is
	// run through files/dhclient (/bin/dhclient), which adds Fedora's
	// --request-options.
	"/usr/libexec/dhclient": "/sbin/dhclient",
}

// ToolingLinks are the tooling's symbolic links (path in the guest ->
// target): the tpm2-tools commands KubeVirt's TPM specs run.
var ToolingLinks = map[string]string{}

func init() {
	for _, c := range []string{"pcrread", "pcrextend", "createprimary", "create", "load", "evictcontrol",
		"unseal", "nvdefine", "nvwrite", "nvread"} {
		ToolingLinks["/bin/tpm2_"+c] = "tpm2"
	}
}

// toolingLibs are libraries the tooling's programs load at run time
// (dlopen), which ldd does not list: tpm2-tools' TCTI for /dev/tpm0 and
// /dev/tpmrm0 (its own libraries are tpm2's, there already).
var toolingLibs = []string{"/lib/x86_64-linux-gnu/libtss2-tcti-device.so.0"}

// sysconfigQemuGA is the Fedora image's /etc/sysconfig/qemu-ga as far as
// the stand-in reads it: no command blocked.
const sysconfigQemuGA = "# Settings of the qemu-guest-agent service (the test guest's init and\n" +
	"# systemctl read BLACKLIST_RPC: comma-separated commands to block; the last\n" +
	"# one counts).\nBLACKLIST_RPC=\n"

// writeTooling writes the tooling initramfs (a gzip-compressed newc cpio
// that the kernel unpacks after the base one): the programs, the libraries
// of theirs that base does not carry already, the scripts, the modules
// mods (paths below modDir, in load order) with their list,
// /etc/vl-tooling-modules, which the init loads after its own, and an ext4
// image (ToolingDataName) made with mkfs.
func writeTooling(ctx context.Context, file, mkfs string, tools, base hostPrograms, kver, modDir string, mods []string) error {
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	c := &cpioWriter{w: gz}
	// The base archive has these directories already.
	c.dirs = map[string]bool{"bin": true, "etc": true, "lib": true, "usr": true}
	c.File("bin/systemctl", 0o755, systemctlScript)
	c.File("bin/dhclient", 0o755, dhclientScript)
	// dhclient's lease database.
	for _, d := range []string{"var", "var/lib", "var/lib/dhcp"} {
		c.Dir(d, 0o755)
	}
	// The agent service's settings, which KubeVirt's tests append a
	// BLACKLIST_RPC to (the init and systemctl read it).
	c.Dir("etc/sysconfig", 0o755)
	c.File("etc/sysconfig/qemu-ga", 0o644, []byte(sysconfigQemuGA))
	if err := writeModules(c, kver, modDir, mods, "etc/vl-tooling-modules"); err != nil {
		return err
	}
	data, err := makeDataImage(ctx, mkfs, filepath.Dir(file))
	if err != nil {
		return err
	}
	c.Parents("usr/lib/vl-tooling/" + ToolingDataName)
	c.File("usr/lib/vl-tooling/"+ToolingDataName, 0o644, data)
	for _, dst := range slices.Sorted(maps.Keys(ToolingLinks)) {
		c.Symlink(strings.TrimPrefix(dst, "/"), ToolingLinks[dst])
	}
	for _, dst := range slices.Sorted(maps.Keys(tools.bins)) {
		data, err := os.ReadFile(tools.bins[dst])
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(dst, "/")
		c.Parents(rel)
		c.File(rel, 0o755, data)
	}
	have := map[string]bool{}
	for _, l := range base.libs {
		have[l] = true
	}
	for _, f := range append(slices.Clone(tools.libs), toolingLibs...) {
		if have[f] {
			continue
		}
		have[f] = true
		if err := addLib(c, f); err != nil {
			return err
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// makeDataImage returns an empty ext4 file system of ToolingDataSize
// labelled vldata, made in dir.
func makeDataImage(ctx context.Context, mkfs, dir string) ([]byte, error) {
	f, err := os.CreateTemp(dir, ".data-*.img")
	if err != nil {
		return nil, err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	if err := makeExt4(ctx, mkfs, name, ToolingDataSize, "vldata"); err != nil {
		return nil, err
	}
	return os.ReadFile(name)
}

// checkToolingNames refuses a tooling program or link named as a busybox
// applet (see ToolingPrograms), and the scripts likewise.
func checkToolingNames(tools map[string]string, applets []string) error {
	names := []string{"systemctl", "dhclient"}
	for dst := range ToolingLinks {
		names = append(names, path.Base(dst))
	}
	for dst := range tools {
		names = append(names, path.Base(dst))
	}
	for _, n := range names {
		if slices.Contains(applets, n) {
			return fmt.Errorf("test guest tooling: %s is a busybox applet too, whose link the tooling's file would overwrite busybox through", n)
		}
	}
	return nil
}
