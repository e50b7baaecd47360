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
// registry is reachable here), boots when the manifest names the image by
// reference; a second run with the registry gone boots from the cache
// (imagePullPolicy IfNotPresent, the default for a tagged image).
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

	code, manifest, stderr := vlctl(t, time.Minute, "testguest", "--poweroff", "--no-network", "--name", "pulled")
	if code != 0 {
		t.Fatalf("vlctl testguest: exit %d: %s", code, stderr)
	}
	if !strings.Contains(manifest, "image: "+g.RootDisk+"\n") {
		t.Fatalf("the test guest's manifest does not name %s as its containerDisk:\n%s", g.RootDisk, manifest)
	}
	manifest = strings.Replace(manifest, "image: "+g.RootDisk+"\n", "image: "+ref+"\n", 1)
	file := filepath.Join(t.TempDir(), "pulled.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
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
	for i, wantPull := range []bool{true, false} {
		code, stdout, stderr := vlctl(t, 4*time.Minute, "run", "--emulation", "--workdir", root, "--image-cache", cache, file)
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
