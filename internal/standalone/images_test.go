package standalone

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// pushDisk pushes a containerDisk image holding data as /disk/disk.img to
// an in-process registry on loopback and returns its reference.
func pushDisk(t *testing.T, data string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "disk/disk.img", Mode: 0o444, Size: int64(len(data)), Typeflag: tar.TypeReg})
	tw.Write([]byte(data))
	tw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	ref := strings.TrimPrefix(s.URL, "http://") + "/disks/private:v1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestImageAccess: a pulled image is root's alone in the cache; each run
// gets read access to it for its own VM user (two runs of the same image
// at once, each with its own entry), recorded for vlctl gc, and loses it
// at its end (or by vlctl gc when the run was killed), while a user no
// run was given never reads it.
func TestImageAccess(t *testing.T) {
	testenv.Root(t, "the image cache is root's; runs' users are other ids")
	ref := pushDisk(t, "a disk pulled with root's credentials")
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} { // reachable: the cache alone keeps others out
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := session{Config: Config{StorageOptions: StorageOptions{ImageCache: filepath.Join(tmp, "images")}, ReportOptions: ReportOptions{Status: io.Discard}}}
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{
		{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: ref}}}}}}
	var err error
	if cfg.pulled, err = pullImages(context.Background(), cfg.ImageCache, cfg.progressOut(), vmi); err != nil {
		t.Fatal(err)
	}
	p := cfg.pulled[ref]
	base := 1879300000 + 4*(os.Getpid()%100000)
	owner := func(id int) vmuser.User { return vmuser.User{UID: id, GID: id, Name: fmt.Sprintf("uid %d", id)} }
	a, b, other := owner(base), owner(base+1), owner(base+2)
	if a.Test("-r", p) || other.Test("-r", p) {
		t.Fatalf("%s is readable by other users before any run", p)
	}
	runA, runB := userstorage.NewHeld(a, io.Discard), userstorage.NewHeld(b, io.Discard)
	for _, r := range []*userstorage.Held{runA, runB} {
		if err := r.OpenImages(cfg.pulled); err != nil {
			t.Fatal(err)
		}
	}
	if !a.Test("-r", p) || !b.Test("-r", p) {
		t.Errorf("the runs' users cannot read their image %s", p)
	}
	if other.Test("-r", p) {
		t.Errorf("a user no run was given reads %s", p)
	}
	if a.Test("-w", p) {
		t.Errorf("a run's user may write the shared image %s", p)
	}
	grants := runA.Grants()
	if len(grants) != 1 || grants[0].Path != p {
		t.Fatalf("run A's grants, as recorded for vlctl gc: %+v; want the one on %s", grants, p)
	}
	g := grants[0]
	// Run B ends; run A goes on reading.
	runB.Release(false)
	if b.Test("-r", p) || !a.Test("-r", p) {
		t.Errorf("after run B's end: B reads %v, A reads %v; want false, true", b.Test("-r", p), a.Test("-r", p))
	}
	// Run A is killed (its descriptor is simply dropped): vlctl gc takes
	// its entry out from its record.
	if err := revokeGrant(g, io.Discard); err != nil {
		t.Fatal(err)
	}
	if a.Test("-r", p) {
		t.Errorf("run A's user still reads %s after vlctl gc", p)
	}
	if f, err := os.Open(p); err != nil {
		t.Error(err)
	} else {
		if acl, err := userstorage.ACL(f); acl != nil || err != nil {
			t.Errorf("%s keeps an ACL after both runs: %q, %v", p, acl, err)
		}
		f.Close()
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil || st.Mode&0o777 != 0o600 {
		t.Errorf("%s: mode %o after both runs, want 0600 (%v)", p, st.Mode&0o777, err)
	}
}
