package kubevirtimage

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/ociimage"
)

// TestImage builds KubeVirt's launcher image from a stand-in of ours, a
// bin directory with two stand-in binaries and a real Debian package
// (dpkg-deb builds it): the top layer replaces our launcher and monitor
// (the monitor with its file capability), holds the package's files and
// links and the virtqemud wrapper, and the image's config stays ours.
func TestImage(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatal("dpkg-deb is needed (Debian's dpkg):", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := CheckBinaries(bin); err == nil || !strings.Contains(err.Error(), "make kubevirt-launcher") {
		t.Fatalf("no binaries: %v", err)
	}
	pkg := filepath.Join(dir, "pkg")
	for _, d := range []string{"DEBIAN", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(pkg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(pkg, "DEBIAN/control"), "Package: xorriso\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n", 0o644)
	write(t, filepath.Join(pkg, "usr/bin/xorriso"), "XORRISO", 0o755)
	if err := os.Symlink("xorriso", filepath.Join(pkg, "usr/bin/xorrisofs")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range Binaries {
		write(t, filepath.Join(bin, name), "KUBEVIRT "+name, 0o755)
	}
	if err := CheckBinaries(bin); err == nil || !strings.Contains(err.Error(), "Debian packages") {
		t.Fatalf("no packages: %v", err)
	}
	if err := os.MkdirAll(DebsDir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg-deb", "--build", "--root-owner-group", pkg, filepath.Join(DebsDir(bin), "xorriso_1_all.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, out)
	}
	work := t.TempDir()
	epoch := time.Unix(1, 0).UTC()
	ours, err := ociimage.Image(ociimage.Spec{
		Files:  []ociimage.File{{Dst: "/usr/bin/virt-launcher", Data: []byte("OURS")}, {Dst: "/usr/bin/virt-probe", Data: []byte("OURS")}},
		Epoch:  epoch,
		Config: ociimage.Config{Entrypoint: []string{"/usr/bin/virt-launcher"}},
	}, work)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Image(context.Background(), ours, bin, work, epoch)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%d layers, %v; want ours and one more", len(layers), err)
	}
	cf, err := img.ConfigFile()
	if err != nil || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/usr/bin/virt-launcher" {
		t.Fatalf("config %+v, %v", cf, err)
	}
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]*tar.Header{}
	data := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name], data[h.Name] = h, string(b)
	}
	if data["usr/bin/virt-launcher"] != "KUBEVIRT virt-launcher" || data["usr/bin/xorriso"] != "XORRISO" {
		t.Errorf("launcher %q, xorriso %q", data["usr/bin/virt-launcher"], data["usr/bin/xorriso"])
	}
	if h := got["usr/bin/xorrisofs"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "xorriso" {
		t.Errorf("xorrisofs: %+v, want a link to xorriso", h)
	}
	if h := got["usr/bin/virt-launcher-monitor"]; h == nil || h.PAXRecords["SCHILY.xattr.security.capability"] == "" {
		t.Errorf("monitor: %+v, want its file capability", h)
	}
	if h := got["usr/sbin/virtqemud"]; h == nil || h.Mode != 0o755 || !strings.Contains(data["usr/sbin/virtqemud"], "exec /usr/sbin/libvirtd") {
		t.Errorf("virtqemud wrapper: %+v %q", h, data["usr/sbin/virtqemud"])
	}
	if h := got["etc/libvirt/qemu.conf"]; h == nil || h.Mode != 0o644 {
		t.Errorf("qemu.conf: %+v", h)
	}
	if _, ok := got["usr/bin/virt-probe"]; ok {
		t.Error("our virt-probe replaced: only the launcher and the monitor are KubeVirt's")
	}
}

func write(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
}
