// Package testguest builds the tiny guest the tests boot: the Debian kernel
// installed on the machine, an initramfs of busybox-static plus the kernel
// modules the guest needs and an /init script that reports what it sees on
// the serial console as VL-* marker lines (markers.go), and a small ext4 root
// disk. Everything comes from Debian packages (linux-image-amd64,
// busybox-static, e2fsprogs, qemu-guest-agent, dropbear-bin); nothing is
// downloaded.
//
// The guest runs a real qemu-guest-agent (Debian's qemu-ga with the shared
// libraries it links, copied into the initramfs) on the
// org.qemu.guest_agent.0 port when the VM has one, unless OptNoAgent is
// given; /etc/os-release names the guest (OSName, OSID, OSVersionID). It
// also runs an SSH server (Debian's dropbear) on port 22 once its network
// is up, for logins with the keys the agent installs.
//
// The result is cached, keyed by kernel version and a hash of everything that
// goes into it, so only the first test run on a machine pays for the build.
//
// As a VMI, the guest is a kernelBoot VM (it has no boot loader): copy Kernel
// and Initrd into Layout.KernelBootDir() as "vmlinuz" and "initrd.img"
// (kernelPath /vmlinuz, initrdPath /initrd.img, kernelArgs DefaultCmdline plus
// any Opt*), a copy of RootDisk as the containerDisk image
// (Layout.ContainerDiskImage(i), raw), and optionally a cloudInitNoCloud or
// cloudInitConfigDrive volume whose user-data starting with "#!" the init
// runs. Disks may be on virtio, SATA or SCSI buses; the console is ttyS0.
// To boot by EFI firmware (OVMF) use EFIKernel instead (kernelPath
// /vmlinuz.efi) and at least 256 MiB; the guest then lists its EFI
// variables (MarkerEFIVar) and writes one on request (OptEFIVar). With a TPM
// it prints MarkerTPM.
package testguest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

//go:embed files/init
var initScript []byte

//go:embed files/udhcpc.script
var udhcpcScript []byte

// buildVersion changes when the build itself changes in a way the inputs
// hashed below do not show.
const buildVersion = "5"

// EFIKernelName is the file name of Guest.EFIKernel in KernelDir (and in a
// kernelBoot container: kernelPath /vmlinuz.efi for a VMI booting by EFI).
const EFIKernelName = "vmlinuz.efi"

// RootDiskSize is the size of the raw ext4 root disk image.
const RootDiskSize = 32 << 20

// Guest is a built test guest. All files are world-readable so that a QEMU
// running as an unprivileged user can open them; RootDisk must be copied
// before a guest writes to it (CopyRootDisk).
type Guest struct {
	// Kernel is the kernel: the uncompressed PVH vmlinux extracted from
	// /boot/vmlinuz-<version> when it has a PVH entry (much faster to boot
	// under TCG), else a copy of that file.
	Kernel string
	// EFIKernel is /boot/vmlinuz-<version> itself, the bzImage with its EFI
	// stub: EFI firmware (OVMF) boots a kernel only through that, not the
	// PVH vmlinux.
	EFIKernel string
	Initrd    string // gzip-compressed newc cpio
	// Tooling is a second initramfs (gzip-compressed newc cpio) that a
	// BIOSDisk with OptTooling loads after Initrd: the Fedora stand-in's
	// tooling (OptTooling).
	Tooling  string
	RootDisk string // raw ext4 image labelled RootLabel
	// KernelDir holds "vmlinuz", "vmlinuz.efi" and "initrd.img", the
	// layout of a KubeVirt kernelBoot container (and ToolingName).
	KernelDir     string
	KernelVersion string
}

// DefaultBusybox is the static busybox Sources uses when none is given
// (Debian's busybox-static).
const DefaultBusybox = "/bin/busybox"

// Sources of the build; fields exist so that tests can point them elsewhere.
type Sources struct {
	BootDir    string // holds vmlinuz-<version>; default /boot
	ModulesDir string // holds <version>/modules.dep; default /lib/modules
	Busybox    string // a static busybox; default /bin/busybox
	Mkfs       string // mkfs.ext4; default from PATH
	Agent      string // qemu-ga; default /usr/sbin/qemu-ga
	SSHD       string // dropbear; default /usr/sbin/dropbear
	// Tooling is the tooling initramfs' programs (path in the guest ->
	// host path); default ToolingPrograms.
	Tooling map[string]string
}

func (s Sources) withDefaults() Sources {
	if s.BootDir == "" {
		s.BootDir = "/boot"
	}
	if s.ModulesDir == "" {
		s.ModulesDir = "/lib/modules"
	}
	if s.Busybox == "" {
		s.Busybox = DefaultBusybox
	}
	if s.Mkfs == "" {
		s.Mkfs = "mkfs.ext4"
	}
	if s.Agent == "" {
		s.Agent = "/usr/sbin/qemu-ga"
	}
	if s.SSHD == "" {
		s.SSHD = "/usr/sbin/dropbear"
	}
	if s.Tooling == nil {
		s.Tooling = ToolingPrograms
	}
	return s
}

// DefaultCacheDir is where Build caches the guest: $VIRTLAUNCHER_TESTGUEST_CACHE
// if set, else $XDG_CACHE_HOME/virtlauncher/testguest if XDG_CACHE_HOME is
// set, else /var/tmp/virtlauncher-testguest (outside root's home, so an
// unprivileged QEMU can read it; kept across reboots). /var/tmp lets
// anyone make that name first: Build refuses the directory unless root
// made it.
func DefaultCacheDir() string {
	if d := os.Getenv("VIRTLAUNCHER_TESTGUEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "virtlauncher", "testguest")
	}
	return "/var/tmp/virtlauncher-testguest"
}

// Build returns the guest from cacheDir, building it there first if needed.
func Build(ctx context.Context, cacheDir string) (*Guest, error) {
	return Sources{}.Build(ctx, cacheDir)
}

// Build builds from these sources. Concurrent builds (parallel test
// packages) are safe: each builds in its own temporary directory and renames
// it into place; the loser of the race uses the winner's result.
//
// Root boots what it finds there, so cacheDir must be a directory only
// root (or the calling user) can change, as must every directory above it
// (safefs.OpenTrusted): one another user made first, a link, or one below
// such a user's directory is refused, naming it, before anything is read
// or written. The build happens in a private temporary directory inside
// it, renamed into place.
func (s Sources) Build(ctx context.Context, cacheDir string) (*Guest, error) {
	// The guest's paths go to QEMUs working elsewhere.
	cacheDir, err := filepath.Abs(cacheDir)
	if err != nil {
		return nil, fmt.Errorf("test guest cache: %w", err)
	}
	cache, err := safefs.OpenTrusted(cacheDir, 0o755)
	if err != nil {
		return nil, fmt.Errorf("test guest cache: %w", err)
	}
	cache.Close()
	s = s.withDefaults()
	if err := checkStatic(s.Busybox); err != nil {
		return nil, err
	}
	kver, kernel, err := findKernel(s.BootDir, s.ModulesDir)
	if err != nil {
		return nil, err
	}
	modDir := filepath.Join(s.ModulesDir, kver)
	mods, err := moduleOrder(modDir)
	if err != nil {
		return nil, err
	}
	progs, err := findPrograms(ctx, map[string]string{AgentPath: s.Agent, SSHDPath: s.SSHD})
	if err != nil {
		return nil, err
	}
	tools, err := findPrograms(ctx, s.Tooling)
	if err != nil {
		return nil, err
	}
	applets, err := exec.CommandContext(ctx, s.Busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", s.Busybox, err)
	}
	if err := checkToolingNames(s.Tooling, strings.Fields(string(applets))); err != nil {
		return nil, err
	}
	toolMods, err := toolingModuleOrder(modDir, mods)
	if err != nil {
		return nil, err
	}
	key, err := cacheKey(kver, kernel, s.Busybox, modDir, slices.Concat(mods, toolMods), slices.Concat(progs.files(), tools.files(), toolingLibs))
	if err != nil {
		return nil, err
	}
	final := filepath.Join(cacheDir, kver+"-"+key)
	if g, err := load(final, kver); err == nil {
		return g, nil
	}

	// Made 0700 by root in the checked cache dir: nobody else can put
	// anything in it while it is built; readable by all once complete.
	tmp, err := os.MkdirTemp(cacheDir, ".build-*")
	if err != nil {
		return nil, fmt.Errorf("test guest cache: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	// "vmlinuz" is what a kernelBoot container would hold; QEMU accepts the
	// uncompressed PVH kernel under that name as well.
	if err := extractPVHKernel(kernel, filepath.Join(tmp, "vmlinuz")); errors.Is(err, errNoPVH) {
		err = copyFile(kernel, filepath.Join(tmp, "vmlinuz"))
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("test guest kernel: %w", err)
	}
	if err := copyFile(kernel, filepath.Join(tmp, EFIKernelName)); err != nil {
		return nil, err
	}
	if err := writeInitrd(filepath.Join(tmp, "initrd.img"), kver, s.Busybox, modDir, mods, progs); err != nil {
		return nil, fmt.Errorf("test guest initrd: %w", err)
	}
	if err := writeTooling(ctx, filepath.Join(tmp, ToolingName), s.Mkfs, tools, progs, kver, modDir, toolMods); err != nil {
		return nil, fmt.Errorf("test guest tooling: %w", err)
	}
	if err := makeRootDisk(ctx, s.Mkfs, filepath.Join(tmp, "root.img")); err != nil {
		return nil, fmt.Errorf("test guest root disk: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("test guest cache: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another builder got there first (rename onto a non-empty
		// directory fails); use its result.
		if g, lerr := load(final, kver); lerr == nil {
			return g, nil
		}
		return nil, fmt.Errorf("test guest cache: %w", err)
	}
	return load(final, kver)
}

func load(dir, kver string) (*Guest, error) {
	g := &Guest{
		Kernel:        filepath.Join(dir, "vmlinuz"),
		EFIKernel:     filepath.Join(dir, EFIKernelName),
		Initrd:        filepath.Join(dir, "initrd.img"),
		Tooling:       filepath.Join(dir, ToolingName),
		RootDisk:      filepath.Join(dir, "root.img"),
		KernelDir:     dir,
		KernelVersion: kver,
	}
	for _, f := range []string{g.Kernel, g.EFIKernel, g.Initrd, g.Tooling, g.RootDisk} {
		if _, err := os.Stat(f); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// CopyRootDisk copies the root disk image to dst (sparse where the image is
// zero), for one guest to write to.
func (g *Guest) CopyRootDisk(dst string) error {
	return copyFile(g.RootDisk, dst)
}

// findKernel picks the newest /boot/vmlinuz-<version> that has modules.
func findKernel(bootDir, modulesDir string) (string, string, error) {
	m, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*"))
	sort.Sort(sort.Reverse(sort.StringSlice(m)))
	for _, k := range m {
		v := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
		if _, err := os.Stat(filepath.Join(modulesDir, v, "modules.dep")); err == nil {
			return v, k, nil
		}
	}
	return "", "", fmt.Errorf("no kernel in %s/vmlinuz-* with modules in %s (install linux-image-amd64)", bootDir, modulesDir)
}

// cacheKey hashes everything the guest is made of.
func cacheKey(kver, kernel, busybox, modDir string, mods, progFiles []string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "v%s\x00%s\x00", buildVersion, kver)
	h.Write(initScript)
	h.Write(udhcpcScript)
	h.Write(osRelease)
	h.Write(shutdownScript)
	h.Write(chpasswdScript)
	h.Write(getentScript)
	h.Write(systemctlScript)
	h.Write(dhclientScript)
	h.Write([]byte(sysconfigQemuGA))
	for _, l := range slices.Sorted(maps.Keys(ToolingLinks)) {
		fmt.Fprintf(h, "%s\x00%s\x00", l, ToolingLinks[l])
	}
	for _, a := range accounts {
		h.Write([]byte(a.data))
	}
	files := append([]string{kernel, busybox}, prefixed(modDir, mods)...)
	for _, f := range append(files, progFiles...) {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func prefixed(dir string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = filepath.Join(dir, n)
	}
	return out
}

func writeInitrd(path, kver, busybox, modDir string, mods []string, progs hostPrograms) error {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	if err := checkStatic(busybox); err != nil {
		return err
	}
	applets, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", busybox, err)
	}

	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	c := &cpioWriter{w: gz}
	for _, d := range []string{"bin", "dev", "etc", "lib", "lib/modules", "mnt", "proc", "run", "sys", "tmp", "usr"} {
		c.Dir(d, 0o755)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	c.CharDev("dev/null", 0o666, 1, 3)
	c.Symlink("sbin", "bin")
	c.Symlink("usr/bin", "../bin")
	c.Symlink("usr/sbin", "../bin")
	c.File("bin/busybox", 0o755, bb)
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			c.Symlink("bin/"+a, "busybox")
		}
	}
	c.File("init", 0o755, initScript)
	c.File("etc/udhcpc.script", 0o755, udhcpcScript)
	c.File("etc/os-release", 0o644, osRelease)
	if err := addPrograms(c, progs); err != nil {
		return err
	}

	// Modules keep their paths below lib/modules/<version>, with a
	// modules.dep of just these, so busybox modprobe works too.
	kdir := "lib/modules/" + kver
	if err := writeModules(c, kver, modDir, mods, "etc/vl-modules"); err != nil {
		return err
	}
	var dep bytes.Buffer
	for _, m := range mods {
		fmt.Fprintf(&dep, "%s:\n", m)
	}
	c.File(kdir+"/modules.dep", 0o644, dep.Bytes())
	if err := c.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// checkStatic refuses a dynamically linked busybox: the initramfs has no
// libc.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; install busybox-static", path)
		}
	}
	return nil
}

func makeRootDisk(ctx context.Context, mkfs, path string) error {
	content, err := os.MkdirTemp(filepath.Dir(path), ".root-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(content)
	if err := os.WriteFile(filepath.Join(content, "README"), []byte("virtlauncher test guest root disk\n"), 0o644); err != nil {
		return err
	}
	if err := makeExt4(ctx, mkfs, path, RootDiskSize, RootLabel, "-d", content); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}

// makeExt4 makes path an ext4 file system of size bytes labelled label,
// owned by root, with mkfs and its further arguments args.
func makeExt4(ctx context.Context, mkfs, path string, size int64, label string, args ...string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, mkfs, append(append([]string{"-q", "-F", "-L", label}, args...), "-E", "root_owner=0:0", path)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", mkfs, err, bytes.TrimSpace(out))
	}
	return nil
}

// writeModules puts the modules mods (paths below modDir, in load order)
// below lib/modules/<kver> of c, and their list, one "<kver>/<path>" a
// line, at list, which the init loads in that order.
func writeModules(c *cpioWriter, kver, modDir string, mods []string, list string) error {
	var order bytes.Buffer
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(modDir, m))
		if err != nil {
			return err
		}
		p := "lib/modules/" + kver + "/" + m
		c.Parents(p)
		c.File(p, 0o644, data)
		fmt.Fprintf(&order, "%s/%s\n", kver, m)
	}
	c.File(list, 0o644, order.Bytes())
	return nil
}

// copyFile copies src to dst (mode 0644), leaving holes where src has
// zero blocks.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	var off int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if bytes.Equal(buf[:n], zero[:n]) {
				off += int64(n)
			} else {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					out.Close()
					return err
				}
				off += int64(n)
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	if err := out.Truncate(off); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, 0o644)
}
