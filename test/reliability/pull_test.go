package reliability

// containerDisk images pulled by `vlctl run` (internal/registrydisk): a
// registry (or whoever sits between it and vlctl) that serves a layer with
// other bytes than its digest names must not get its disk to any guest,
// nor leave it in root's cache; and the cache, which holds images pulled
// with root's credentials, is readable by the run that uses an image and
// by no other user.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// swapRegistry is an in-process registry on loopback that serves, for the
// blob digests in swap, other bytes of the same length.
type swapRegistry struct {
	reg  http.Handler
	mu   sync.Mutex
	swap map[string][]byte
}

func (s *swapRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if i := strings.LastIndex(r.URL.Path, "/blobs/"); i >= 0 && r.Method == http.MethodGet {
		s.mu.Lock()
		body, ok := s.swap[r.URL.Path[i+len("/blobs/"):]]
		s.mu.Unlock()
		if ok {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusOK)
			w.Write(body)
			return
		}
	}
	s.reg.ServeHTTP(w, r)
}

// diskGzip is a gzip layer holding disk as disk/disk.img; with size > 0
// it is padded to exactly size bytes (the gzip header's extra field), as
// an attacker matches the length of the layer it replaces.
func diskGzip(t *testing.T, disk []byte, size int) []byte {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{Name: "disk/disk.img", Mode: 0o444, Size: int64(len(disk)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(disk)
	tw.Close()
	compress := func(extra []byte) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Extra = extra
		zw.Write(tb.Bytes())
		zw.Close()
		return b.Bytes()
	}
	b := compress(nil)
	if size > 0 {
		if pad := size - len(b) - 2; pad >= 0 && pad <= 0xffff {
			b = compress(make([]byte, pad))
		}
		if len(b) != size {
			t.Fatalf("could not pad the substitute layer to %d bytes", size)
		}
	}
	return b
}

const pullManifest = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: pulled
  namespace: default
spec:
  domain:
    resources:
      requests:
        memory: 64Mi
    devices:
      disks:
      - name: rootdisk
        disk:
          bus: virtio
  volumes:
  - name: rootdisk
    containerDisk:
      image: %s
`

// readMonitor is the VM user's side of the run: started by vlctl run as
// virt-launcher-monitor, it reads the containerDisk link root made (as
// QEMU would) and notes what it read, then ends as a failed launcher.
const readMonitor = `#!/bin/sh
out='@OUT@'; w=$(pwd)
if sum=$(sha256sum <"$w/share/container-disks/disk_0.img"); then
	echo "read ${sum%% *}" >>"$out/notes"
else
	echo "read denied" >>"$out/notes"
fi
echo "read monitor done"
exit 3
`

// TestPullSubstitutedLayer: `vlctl run` (standalone.Run, as root) of a
// manifest whose containerDisk is pinned by digest, from a registry that
// serves the disk's layer with the attacker's bytes (same length): the run
// is refused naming the image, the layer and "digest mismatch" before
// anything is made; the cache holds nothing (no disk, no reference, no
// temporary file), the work root, the record directory and a root-owned
// canary outside are as they were. Then the registry serves the layer as
// pushed: the run's VM user reads exactly the pushed disk through its
// link, another user cannot read the cached file, and after the run the
// file is root's alone again (0600, no ACL).
func TestPullSubstitutedLayer(t *testing.T) {
	u := needLinkUser(t)
	c := newCanary(t)
	good := make([]byte, 64<<10)
	if _, err := rand.Read(good); err != nil {
		t.Fatal(err)
	}
	evil := make([]byte, len(good))
	copy(evil, "the attacker's boot sector")
	layerBytes := diskGzip(t, good, 0)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	reg := &swapRegistry{reg: registry.New(registry.Logger(log.New(io.Discard, "", 0))), swap: map[string][]byte{}}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	r, err := name.ParseReference(host + "/containerdisks/pulled:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ld, err := layer.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/containerdisks/pulled@" + digest.String()
	reg.swap[ld.String()] = diskGzip(t, evil, len(layerBytes))

	manifest := filepath.Join(t.TempDir(), "vmi.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(pullManifest, ref)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := userDir(t, u)
	bin := t.TempDir()
	script := strings.ReplaceAll(readMonitor, "@OUT@", out)
	for _, n := range []string{"virt-launcher-monitor", "virt-launcher"} {
		if err := os.WriteFile(filepath.Join(bin, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(testenv.OpenDir(t), "images")
	records := testenv.OpenDir(t)
	l := &linkRun{u: u, uids: u.uids(), workRoot: shortWorkRoot(t), manifest: manifest, binDir: bin}
	run := func() (string, error) {
		return l.runWith(records, func(c *standalone.Config) { c.ImageCache = cache })
	}
	entries := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}

	status, err := run()
	if err == nil || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), ld.String()) || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("vlctl run of a substituted layer: %v; want a refusal naming %s, layer %s and \"digest mismatch\"\n%s", err, ref, ld, status)
	}
	t.Logf("refused: %v", err)
	if left := entries(cache); len(left) > 0 {
		t.Errorf("left in the image cache: %v", left)
	}
	if left := entries(records); len(left) > 0 {
		t.Errorf("left in the record directory: %v", left)
	}
	if _, err := os.Stat(filepath.Join(out, "notes")); err == nil {
		t.Error("the VM's launcher was started for a refused image")
	}
	c.untouched(t)
	l.nothingLeft(t)

	// The registry serves the image as pushed.
	reg.mu.Lock()
	delete(reg.swap, ld.String())
	reg.mu.Unlock()
	status, err = run()
	if err == nil || !strings.Contains(err.Error(), "read monitor done") {
		t.Fatalf("vlctl run: %v, want the fake launcher's failure\n%s", err, status)
	}
	notes, err := os.ReadFile(filepath.Join(out, "notes"))
	if err != nil {
		t.Fatalf("the monitor left no notes: %v", err)
	}
	if want := fmt.Sprintf("read %x\n", sha256.Sum256(good)); string(notes) != want {
		t.Errorf("the VM's user read: %q, want the pushed disk (%q)", notes, want)
	}
	var disks []string
	for _, n := range entries(cache) {
		if strings.HasPrefix(n, ".") {
			t.Errorf("temporary file %s left in the cache", n)
		}
		if strings.HasSuffix(n, ".img") {
			disks = append(disks, filepath.Join(cache, n))
		}
	}
	if len(disks) != 1 {
		t.Fatalf("cached disks %v, want one", disks)
	}
	p := disks[0]
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Mode&0o777 != 0o600 {
		t.Errorf("%s after the run: owner %d, mode %o; want root's, 0600", p, st.Uid, st.Mode&0o777)
	}
	if _, err := unix.Getxattr(p, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("%s keeps an ACL after the run: %v", p, err)
	}
	others := []int{u.uid, 65534}
	if vl, err := user.Lookup("virtlauncher"); err == nil {
		if id, err := strconv.Atoi(vl.Uid); err == nil {
			others[1] = id
		}
	}
	for _, id := range others {
		cmd := exec.Command("test", "-r", p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id), Gid: uint32(id)}}
		if cmd.Run() == nil {
			t.Errorf("uid %d reads %s when no run of its own uses it", id, p)
		}
	}
	c.untouched(t)
	l.nothingLeft(t)
}
