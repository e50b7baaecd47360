package registrydisk

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	k8sv1 "k8s.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// image is an image of one layer holding files (name -> contents).
func image(t *testing.T, files map[string]string) ggcr.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o444, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(data))
	}
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// serve runs an in-process registry (go-containerregistry's) on loopback
// and returns its host:port; nothing here reaches any other registry.
func serve(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

func push(t *testing.T, ref string, img ggcr.Image) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFetchPolicies: a pull extracts the disk; IfNotPresent and Never use
// the cache without asking the registry (it is gone by then); Always
// follows a tag moved to another image; Never without a cached image is
// refused.
func TestFetchPolicies(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	ctx := context.Background()
	host := serve(t)
	ref := host + "/disks/test:v1"
	push(t, ref, image(t, map[string]string{"disk/disk.qcow2": "first"}))
	c := &Cache{Dir: t.TempDir() + "/cache", Status: io.Discard}
	if _, err := c.Fetch(ctx, host+"/disks/other:v1", "", k8sv1.PullNever); err == nil || !strings.Contains(err.Error(), "Never") {
		t.Errorf("Never, nothing cached: %v, want a refusal naming the policy", err)
	}
	p1, err := c.Fetch(ctx, ref, "", k8sv1.PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, p1); got != "first" {
		t.Errorf("disk %q, want first", got)
	}
	if fi, _ := os.Stat(p1); fi.Mode().Perm() != 0o600 {
		t.Errorf("disk mode %v, want 0600 (root's alone: a run is granted its own read access)", fi.Mode().Perm())
	}
	// The tag moves to a new image.
	push(t, ref, image(t, map[string]string{"disk/disk.qcow2": "second"}))
	for _, pol := range []k8sv1.PullPolicy{k8sv1.PullIfNotPresent, k8sv1.PullNever} {
		p, err := c.Fetch(ctx, ref, "", pol)
		if err != nil || p != p1 {
			t.Errorf("%s: %s, %v, want the cached %s", pol, p, err, p1)
		}
	}
	p2, err := c.Fetch(ctx, ref, "", k8sv1.PullAlways)
	if err != nil {
		t.Fatal(err)
	}
	if p2 == p1 || read(t, p2) != "second" {
		t.Errorf("Always after the tag moved: %s %q, want the new image's disk", p2, read(t, p2))
	}
	if p, err := c.Fetch(ctx, ref, "", k8sv1.PullNever); err != nil || p != p2 {
		t.Errorf("Never after Always: %s, %v, want %s", p, err, p2)
	}
}

// TestFetchRefuses: images that are not one disk are refused with what is
// wrong, and nothing is left in the cache but the cache itself.
func TestFetchRefuses(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	ctx := context.Background()
	host := serve(t)
	dir := t.TempDir()
	c := &Cache{Dir: dir}
	for _, tc := range []struct {
		name, path string
		files      map[string]string
		want       string
	}{
		{"nodisk", "", map[string]string{"etc/hostname": "x"}, "no disk under /disk/"},
		{"two", "", map[string]string{"disk/a.img": "a", "disk/b.img": "b"}, "several files under /disk/"},
		{"path", "disk/c.img", map[string]string{"disk/a.img": "a"}, "no file /disk/c.img"},
	} {
		ref := host + "/disks/" + tc.name + ":v1"
		push(t, ref, image(t, tc.files))
		_, err := c.Fetch(ctx, ref, tc.path, k8sv1.PullAlways)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ref) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", tc.name, err, ref, tc.want)
		}
	}
	if _, err := c.Fetch(ctx, host+"/disks/absent:v1", "", k8sv1.PullAlways); err == nil {
		t.Error("an image the registry does not have: no error")
	}
	if _, err := c.Fetch(ctx, "Not A Reference", "", k8sv1.PullAlways); err == nil || !strings.Contains(err.Error(), "Not A Reference") {
		t.Errorf("a malformed reference: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left in the cache: %s", e.Name())
	}
	// The chosen file by path works.
	ref := host + "/disks/two:v1"
	p, err := c.Fetch(ctx, ref, "/disk/b.img", k8sv1.PullIfNotPresent)
	if err != nil || read(t, p) != "b" {
		t.Errorf("containerDisk.path /disk/b.img: %s, %v", p, err)
	}
}
