package standalone_test

import (
	"archive/tar"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlRunPulledContainerDisk: the test guest's root disk, pushed as a
// KubeVirt containerDisk (the file under /disk/) to a registry that this
// test runs on loopback (go-containerregistry's, in process: no outside
// registry is reachable here), and its kernel and initrd, pushed as a
// kernelBoot container image (/boot/vmlinuz, /boot/initrd.img), boot when
// the manifest names both images by reference; a second run with the
// registry gone boots from the cache (imagePullPolicy IfNotPresent, the
// default for a tagged image).
func TestVlctlRunPulledContainerDisk(t *testing.T) {
	needRoot(t)
	t.Parallel()
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	// The containerDisk layer: disk/root.img, as KubeVirt's images hold it.
	layerTar := filepath.Join(t.TempDir(), "layer.tar")
	writeDiskLayer(t, layerTar, g.RootDisk)
	layer, err := tarball.LayerFromFile(layerTar)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/containerdisks/vltest:v1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	// The kernelBoot image, with a link next to the kernel as
	// distributions have (naming it is refused, naming the file works).
	kernelTar := filepath.Join(t.TempDir(), "kernel.tar")
	writeLayer(t, kernelTar, []layerFile{{name: "boot/vmlinuz", src: filepath.Join(g.KernelDir, "vmlinuz")},
		{name: "boot/initrd.img", src: filepath.Join(g.KernelDir, "initrd.img")}, {name: "boot/vmlinuz-link", link: "vmlinuz"}})
	kernelLayer, err := tarball.LayerFromFile(kernelTar)
	if err != nil {
		t.Fatal(err)
	}
	kernelImg, err := mutate.AppendLayers(empty.Image, kernelLayer)
	if err != nil {
		t.Fatal(err)
	}
	kernelRef := strings.TrimPrefix(srv.URL, "http://") + "/kernels/vltest:v1"
	kr, err := name.ParseReference(kernelRef)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(kr, kernelImg); err != nil {
		t.Fatal(err)
	}

	manifest := testGuestText(t, "pulled", "--poweroff", "--no-network")
	if !strings.Contains(manifest, "image: "+g.RootDisk+"\n") {
		t.Fatalf("the test guest's manifest does not name %s as its containerDisk:\n%s", g.RootDisk, manifest)
	}
	manifest = strings.Replace(manifest, "image: "+g.RootDisk+"\n", "image: "+ref+"\n", 1)
	local := "image: " + g.KernelDir + "\n          kernelPath: /vmlinuz\n          initrdPath: /initrd.img\n"
	if !strings.Contains(manifest, local) {
		t.Fatalf("the test guest's manifest does not boot its kernel from %s:\n%s", g.KernelDir, manifest)
	}
	pulledKernel := "image: " + kernelRef + "\n          kernelPath: /boot/vmlinuz\n          initrdPath: /boot/initrd.img\n"
	file := filepath.Join(t.TempDir(), "pulled.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(manifest, local, pulledKernel, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(t.TempDir(), "linked.yaml")
	if err := os.WriteFile(linked, []byte(strings.Replace(manifest, local, strings.Replace(pulledKernel, "/boot/vmlinuz\n", "/boot/vmlinuz-link\n", 1), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// QEMU's user reaches the cache as it reaches /var/cache's.
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(tmp, "images")
	root := workRoot(t)
	// (with a cache of its own: it pulls the containerDisk first)
	code, _, stderr := vlctl(t, 4*time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), "--image-cache", filepath.Join(tmp, "images2"), linked)
	if want := "spec.domain.firmware.kernelBoot.container.kernelPath: image " + kernelRef + ": /boot/vmlinuz-link is a link in the image (to vmlinuz): name the file itself"; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("a kernelPath naming a link in the image: exit %d, %q; want a failure saying %q", code, stderr, want)
	}
	for i, wantPull := range []bool{true, false} {
		code, stdout, stderr := vlctl(t, 4*time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), "--image-cache", cache, file)
		if code != 0 {
			t.Fatalf("run %d: exit status %d, want 0; stderr:\n%s", i+1, code, stderr)
		}
		for _, want := range []string{testguest.MarkerReady, testguest.MarkerPowerOff} {
			if !strings.Contains(stdout, want) {
				t.Errorf("run %d: console lacks %q", i+1, want)
			}
		}
		if pulled := strings.Contains(stderr, "vlctl: pulling "+ref); pulled != wantPull {
			t.Errorf("run %d: pulled %v, want %v; stderr:\n%s", i+1, pulled, wantPull, stderr)
		}
		if pulled := strings.Count(stderr, "vlctl: pulling "+kernelRef); pulled != map[bool]int{true: 2, false: 0}[wantPull] {
			t.Errorf("run %d: pulled the kernel image %d times, want the kernel and the initrd %v; stderr:\n%s", i+1, pulled, wantPull, stderr)
		}
		srv.Close() // the second run has only the cache
	}
	checkNothingLeft(t, root)
}

// writeDiskLayer writes a layer tarball holding disk (a file) as
// disk/root.img, read-only as KubeVirt's containerdisks are.
func writeDiskLayer(t *testing.T, out, disk string) {
	t.Helper()
	src, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: "disk/", Typeflag: tar.TypeDir, Mode: 0o555}); err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: "disk/root.img", Typeflag: tar.TypeReg, Mode: 0o444, Size: st.Size(), Uid: 107, Gid: 107}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(tw, src); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// layerFile is one entry of a test image layer: a copy of the file src,
// or a symbolic link to link.
type layerFile struct{ name, src, link string }

// writeLayer writes a layer tarball of files (directories made for them).
func writeLayer(t *testing.T, out string, files []layerFile) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	dirs := map[string]bool{}
	for _, lf := range files {
		if d := filepath.Dir(lf.name); !dirs[d] {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		if lf.link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: lf.name, Typeflag: tar.TypeSymlink, Linkname: lf.link, Mode: 0o777}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(lf.src)
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(&tar.Header{Name: lf.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
