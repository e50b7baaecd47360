// Package kubevirtimage makes KubeVirt's own launcher runnable on this
// machine as the control of our comparisons (the bench's side-by-side
// part, the e2e's start-time comparison): our launcher image's Debian root
// file system with KubeVirt's virt-launcher and virt-launcher-monitor
// (built from source by `make kubevirt-launcher`) in place of ours, plus
// what KubeVirt's launcher needs from its own image that Debian's packages
// lack. Its image is CentOS Stream 9 RPMs, which cannot be fetched here;
// the differences are listed in bench/README.md.
package kubevirtimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// Binaries are the programs of KubeVirt's that replace ours, in /usr/bin.
// The other programs of a launcher image (container-disk, virt-tail,
// virt-probe, virt-freezer, node-labeller.sh) stay ours: they are not the
// launcher, and virt-controller's pod runs them in containers of their own.
var Binaries = []string{"virt-launcher", "virt-launcher-monitor"}

// MonitorCaps are the file capabilities of the monitor in both images (ours:
// the Makefile's mkimage -cap; KubeVirt's: its image build), which a
// non-root monitor hands to the launcher as ambient capabilities.
var MonitorCaps = []string{"net_bind_service"}

// Extras is what KubeVirt's launcher image gives its launcher that the
// Debian root file system does not have, by path in the image:
//   - /usr/sbin/virtqemud: KubeVirt starts the modular QEMU daemon by that
//     path and dials virtqemud-sock; Debian 12 ships only the monolithic
//     libvirtd, which runs the same QEMU driver and names its socket
//     libvirt-sock in the same directory, so a link bridges the two names
//     ($XDG_RUNTIME_DIR/libvirt for a non-root pod, /var/run/libvirt for a
//     root one);
//   - /etc/libvirt/qemu.conf, virtqemud.conf and virtlogd.conf, which
//     KubeVirt's launcher copies and appends to (empty: every setting it
//     needs it writes itself; its image's files hold only comments).
//
// The Debian packages it needs besides (xorriso, for its cloud-init ISOs)
// are the Makefile's KUBEVIRT_IMAGE_DEBS, which `make kubevirt-launcher`
// downloads into DebsDir.
var Extras = map[string]string{
	"/usr/sbin/virtqemud": `#!/bin/sh
# Debian 12 has no virtqemud: libvirtd runs the same QEMU driver.
d="${XDG_RUNTIME_DIR:-/var/run}/libvirt"
mkdir -p "$d" && ln -sf libvirt-sock "$d/virtqemud-sock"
exec /usr/sbin/libvirtd "$@"
`,
	"/etc/libvirt/qemu.conf":      "",
	"/etc/libvirt/virtqemud.conf": "",
	"/etc/libvirt/virtlogd.conf":  "",
}

// DebsDir is where the packages are, next to KubeVirt's binaries.
func DebsDir(bin string) string { return filepath.Join(bin, "debs") }

// CheckBinaries says what is missing from bin, naming the make target
// that builds it.
func CheckBinaries(bin string) error {
	for _, name := range Binaries {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return fmt.Errorf("KubeVirt's launcher: %w (make kubevirt-launcher builds it)", err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(DebsDir(bin), "*.deb")); len(m) == 0 {
		return fmt.Errorf("KubeVirt's launcher: no Debian packages in %s (make kubevirt-launcher downloads them)", DebsDir(bin))
	}
	return nil
}

// UnpackDebs unpacks the packages in DebsDir(bin) into root, as dpkg would
// have installed them into KubeVirt's image (without their scripts: these
// have none that matter to the launcher).
func UnpackDebs(ctx context.Context, bin, root string) error {
	debs, err := filepath.Glob(filepath.Join(DebsDir(bin), "*.deb"))
	if err != nil {
		return err
	}
	if len(debs) == 0 {
		return fmt.Errorf("no packages in %s: make kubevirt-launcher downloads what KubeVirt's image has beyond ours (xorriso)", DebsDir(bin))
	}
	sort.Strings(debs)
	for _, d := range debs {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", d, root).CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("unpack %s: %v: %s", d, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// WriteExtras writes Extras into the unpacked root file system root.
func WriteExtras(root string) error {
	for name, content := range Extras {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), extraMode(content)); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

func extraMode(content string) os.FileMode {
	if strings.HasPrefix(content, "#!") {
		return 0o755
	}
	return 0o644
}

// Image is our launcher image (an image read from `make image`'s archive)
// with one more layer: the packages, KubeVirt's binaries from bin and the
// extras. work holds the layer's files and must outlive every use of the
// image.
func Image(ctx context.Context, ours v1.Image, bin, work string, epoch time.Time) (v1.Image, error) {
	if err := CheckBinaries(bin); err != nil {
		return nil, err
	}
	debs := filepath.Join(work, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	if err := UnpackDebs(ctx, bin, debs); err != nil {
		return nil, err
	}
	files, err := ociimage.DirFiles(debs, "/")
	if err != nil {
		return nil, err
	}
	for _, name := range Binaries {
		f := ociimage.File{Dst: "/usr/bin/" + name, Src: filepath.Join(bin, name)}
		if name == "virt-launcher-monitor" {
			f.Caps = MonitorCaps
		}
		files = append(files, f)
	}
	names := make([]string, 0, len(Extras))
	for name := range Extras {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		files = append(files, ociimage.File{Dst: name, Data: []byte(Extras[name]), Mode: int64(extraMode(Extras[name]))})
	}
	return ociimage.Append(ours, files, epoch, "internal/kubevirtimage: KubeVirt's virt-launcher and virt-launcher-monitor, xorriso, the virtqemud wrapper", work)
}
