package registrydisk

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	k8sv1 "k8s.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// testRegistry is go-containerregistry's in-process registry on loopback,
// with what an attacker between vlctl and the registry (or a registry that
// went bad) can do to a blob: serve other bytes for it (swap), or stop
// half-way through it until told to go on (stall).
type testRegistry struct {
	host string
	reg  http.Handler
	mu   sync.Mutex
	swap map[string][]byte
	// stall: a blob whose digest is here is served up to its half, then
	// held until the channel is closed or the client goes away.
	stall map[string]chan struct{}
}

func newRegistry(t *testing.T) *testRegistry {
	t.Helper()
	tr := &testRegistry{reg: registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		swap: map[string][]byte{}, stall: map[string]chan struct{}{}}
	s := httptest.NewServer(tr)
	t.Cleanup(s.Close)
	tr.host = strings.TrimPrefix(s.URL, "http://")
	return tr
}

func (tr *testRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := strings.LastIndex(r.URL.Path, "/blobs/")
	if i < 0 || r.Method != http.MethodGet {
		tr.reg.ServeHTTP(w, r)
		return
	}
	digest := r.URL.Path[i+len("/blobs/"):]
	tr.mu.Lock()
	body, swapped := tr.swap[digest]
	release, stalled := tr.stall[digest]
	tr.mu.Unlock()
	if !swapped && !stalled {
		tr.reg.ServeHTTP(w, r)
		return
	}
	if !swapped {
		rec := httptest.NewRecorder()
		tr.reg.ServeHTTP(rec, r)
		body = rec.Body.Bytes()
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Docker-Content-Digest", digest)
	w.WriteHeader(http.StatusOK)
	if stalled {
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		body = body[len(body)/2:]
	}
	w.Write(body)
}

// push writes img as ref and returns the reference pinned by digest.
func (tr *testRegistry) push(t *testing.T, repo string, img ggcr.Image) string {
	t.Helper()
	ref := tr.host + "/" + repo + ":v1"
	push(t, ref, img)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return tr.host + "/" + repo + "@" + d.String()
}

// tarOf is a layer's tar holding name with data, followed by trailing
// (bytes after the tar's end, which the layer's digests cover).
func tarOf(t *testing.T, name string, data, trailing []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o444, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return append(buf.Bytes(), trailing...)
}

// gzipped compresses data; with size > 0 the result is padded to exactly
// size bytes with the gzip header's extra field, as an attacker matches a
// layer's length.
func gzipped(t *testing.T, data []byte, size int) []byte {
	t.Helper()
	compress := func(extra []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Extra = extra
		zw.Write(data)
		zw.Close()
		return buf.Bytes()
	}
	b := compress(nil)
	if size == 0 {
		return b
	}
	pad := size - len(b) - 2 // the extra field's own length takes 2 bytes
	if pad < 0 || pad > 0xffff {
		t.Fatalf("cannot pad %d bytes of gzip to %d", len(b), size)
	}
	b = compress(make([]byte, pad))
	if len(b) != size {
		t.Fatalf("padded gzip is %d bytes, want %d", len(b), size)
	}
	return b
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipLayer(t *testing.T, b []byte) ggcr.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, layers ...ggcr.Layer) ggcr.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func layerDigest(t *testing.T, l ggcr.Layer) string {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// cacheLeft lists what is in the cache directory (nothing when it does
// not exist).
func cacheLeft(t *testing.T, dir string) []string {
	t.Helper()
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

// TestFetchVerifiesLayers: an image pinned by digest whose layer the
// registry serves with other bytes of the same length (a gzip layer, an
// uncompressed one, and either with the change after the tar's end, where
// extraction alone never looks), or whose config names another
// uncompressed layer than its layer holds, is refused naming the image,
// the layer and "digest mismatch", and leaves nothing in the cache: no
// disk, no reference, no temporary file. The same image served as pushed
// is pulled.
func TestFetchVerifiesLayers(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	good := randomBytes(t, 32<<10)
	evil := make([]byte, len(good)) // the same length, the attacker's bytes
	copy(evil, "attacker's disk")
	trailing := randomBytes(t, 32<<10)
	for _, tc := range []struct {
		name        string
		layer, swap []byte
		gzip        bool
	}{
		{"gzip", gzipped(t, tarOf(t, "disk/disk.img", good, nil), 0), nil, true},
		{"uncompressed", tarOf(t, "disk/disk.img", good, nil), tarOf(t, "disk/disk.img", evil, nil), false},
		{"trailing-uncompressed", tarOf(t, "disk/disk.img", good, trailing), tarOf(t, "disk/disk.img", good, make([]byte, len(trailing))), false},
		{"trailing-gzip", gzipped(t, tarOf(t, "disk/disk.img", good, trailing), 0), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var layer ggcr.Layer
			if tc.gzip {
				layer = gzipLayer(t, tc.layer)
				// The same tar with the attacker's content, padded to the
				// layer's length.
				src := tarOf(t, "disk/disk.img", evil, nil)
				if strings.HasPrefix(tc.name, "trailing") {
					src = tarOf(t, "disk/disk.img", good, make([]byte, len(trailing)))
				}
				tc.swap = gzipped(t, src, len(tc.layer))
			} else {
				layer = static.NewLayer(tc.layer, types.OCIUncompressedLayer)
			}
			if len(tc.swap) != len(tc.layer) {
				t.Fatalf("substitute is %d bytes, the layer %d", len(tc.swap), len(tc.layer))
			}
			ref := reg.push(t, "disks/"+tc.name, imageOf(t, layer))
			ld := layerDigest(t, layer)
			dir := filepath.Join(t.TempDir(), "cache")
			c := &Cache{Dir: dir}
			reg.mu.Lock()
			reg.swap[ld] = tc.swap
			reg.mu.Unlock()
			p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
			if err == nil || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), ld) || !strings.Contains(err.Error(), "digest mismatch") {
				t.Errorf("substituted layer: %q, %v; want a refusal naming %s, layer %s and \"digest mismatch\"", p, err, ref, ld)
			}
			t.Logf("refused: %v", err)
			if left := cacheLeft(t, dir); len(left) > 0 {
				t.Errorf("left in the cache after the refusal: %v", left)
			}
			reg.mu.Lock()
			delete(reg.swap, ld)
			reg.mu.Unlock()
			p, err = c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
			if err != nil || read(t, p) != string(good) {
				t.Errorf("the image as pushed: %s, %v; want its disk", p, err)
			}
		})
	}
	t.Run("diffid", func(t *testing.T) {
		layer := gzipLayer(t, gzipped(t, tarOf(t, "disk/disk.img", good, nil), 0))
		img := imageOf(t, layer)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		other, _, err := ggcr.SHA256(bytes.NewReader(tarOf(t, "disk/disk.img", evil, nil)))
		if err != nil {
			t.Fatal(err)
		}
		cf.RootFS.DiffIDs[0] = other
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			t.Fatal(err)
		}
		ref := reg.push(t, "disks/diffid", img)
		dir := filepath.Join(t.TempDir(), "cache")
		c := &Cache{Dir: dir}
		p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
		ld := layerDigest(t, layer)
		if err == nil || !strings.Contains(err.Error(), ld) || !strings.Contains(err.Error(), other.String()) || !strings.Contains(err.Error(), "digest mismatch") {
			t.Errorf("config naming another layer: %q, %v; want a refusal naming layer %s, diff ID %s and \"digest mismatch\"", p, err, ld, other)
		}
		t.Logf("refused: %v", err)
		if left := cacheLeft(t, dir); len(left) > 0 {
			t.Errorf("left in the cache after the refusal: %v", left)
		}
	})
	t.Run("config", func(t *testing.T) {
		img := imageOf(t, gzipLayer(t, gzipped(t, tarOf(t, "disk/disk.img", good, nil), 0)))
		ref := reg.push(t, "disks/config", img)
		raw, err := img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		// One hex digit of the diff ID the config names, changed.
		bad := bytes.Clone(raw)
		i := bytes.Index(bad, []byte("sha256:")) + len("sha256:")
		if bad[i] == '0' {
			bad[i] = '1'
		} else {
			bad[i] = '0'
		}
		if i < len("sha256:") || len(bad) != len(raw) || bytes.Equal(bad, raw) {
			t.Fatalf("could not make a substitute config of the same length:\n%s", raw)
		}
		reg.mu.Lock()
		reg.swap[m.Config.Digest.String()] = bad
		reg.mu.Unlock()
		dir := filepath.Join(t.TempDir(), "cache")
		c := &Cache{Dir: dir}
		p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
		if err == nil || !strings.Contains(err.Error(), m.Config.Digest.String()) || !strings.Contains(err.Error(), "digest mismatch") {
			t.Errorf("substituted config: %q, %v; want a refusal naming config %s and \"digest mismatch\"", p, err, m.Config.Digest)
		}
		t.Logf("refused: %v", err)
		if left := cacheLeft(t, dir); len(left) > 0 {
			t.Errorf("left in the cache after the refusal: %v", left)
		}
	})
}

// TestFetchLimit: a gzip bomb (a few KiB that expand to far more than the
// cache's limit: one huge file, or a small file followed by zeros after
// the tar's end) is refused naming the limit, quickly, with nothing left.
// Within the limit, runs of zeros in the disk are holes: a mostly empty
// disk takes next to no space in the cache.
func TestFetchLimit(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	const limit = 16 << 20
	bomb := func(size, trailing int64) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: "disk/disk.img", Mode: 0o444, Size: size, Typeflag: tar.TypeReg})
		io.CopyN(tw, zeros{}, size)
		tw.Close()
		io.CopyN(zw, zeros{}, trailing)
		zw.Close()
		return buf.Bytes()
	}
	for _, tc := range []struct {
		name           string
		size, trailing int64
	}{
		{"file", 256 << 20, 0},
		{"trailing", 1 << 10, 256 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bomb(tc.size, tc.trailing)
			t.Logf("%d bytes of gzip expand to %d", len(b), tc.size+tc.trailing)
			ref := reg.push(t, "disks/bomb-"+tc.name, imageOf(t, gzipLayer(t, b)))
			dir := filepath.Join(t.TempDir(), "cache")
			c := &Cache{Dir: dir, MaxSize: limit}
			start := time.Now()
			p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
			if err == nil || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "limit") || !strings.Contains(err.Error(), strconv.Itoa(limit)) {
				t.Errorf("gzip bomb: %q, %v; want a refusal naming the image and the limit of %d bytes", p, err, limit)
			}
			t.Logf("refused: %v", err)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("the refusal took %s", d)
			}
			if left := cacheLeft(t, dir); len(left) > 0 {
				t.Errorf("left in the cache after the refusal: %v", left)
			}
		})
	}
	t.Run("sparse", func(t *testing.T) {
		disk := make([]byte, 12<<20)
		copy(disk, "boot sector")
		copy(disk[6<<20:], "middle")
		copy(disk[len(disk)-3:], "end")
		ref := reg.push(t, "disks/sparse", imageOf(t, gzipLayer(t, gzipped(t, tarOf(t, "disk/disk.img", disk, nil), 0))))
		c := &Cache{Dir: filepath.Join(t.TempDir(), "cache"), MaxSize: limit}
		p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
		if err != nil {
			t.Fatal(err)
		}
		if got := read(t, p); got != string(disk) {
			t.Errorf("the extracted disk differs from the image's (%d bytes, want %d)", len(got), len(disk))
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if used := st.Blocks * 512; used > 1<<20 {
			t.Errorf("the extracted disk of %d bytes, nearly all zeros, takes %d bytes: zeros were written, not left as holes", len(disk), used)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// The killed pull's child process: it pulls VL_PULL_CHILD_REF into the
// cache VL_PULL_CHILD_DIR and is killed half-way by the test.
const (
	childDirEnv = "VL_PULL_CHILD_DIR"
	childRefEnv = "VL_PULL_CHILD_REF"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		c := &Cache{Dir: dir}
		_, err := c.Fetch(context.Background(), os.Getenv(childRefEnv), "", k8sv1.PullIfNotPresent)
		fmt.Fprintln(os.Stderr, "pull child:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// waitTemp waits for a pull's temporary file in dir to hold something and
// returns its name.
func waitTemp(t *testing.T, dir string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, n := range cacheLeft(t, dir) {
			if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && strings.HasPrefix(n, ".pull-") && fi.Size() > 0 {
				return n
			}
		}
	}
	t.Fatalf("no pull's temporary file appeared in %s: %v", dir, cacheLeft(t, dir))
	return ""
}

// TestFetchKilledPull: a pull killed half-way (SIGKILL: no clean-up of
// its own runs) leaves its temporary file, which the next pull into the
// cache removes; a pull that is still going on in another process (here:
// another goroutine, with a lock of its own) keeps its file and completes.
func TestFetchKilledPull(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	disk := randomBytes(t, 1<<20)
	layer := gzipLayer(t, gzipped(t, tarOf(t, "disk/disk.img", disk, nil), 0))
	slow := reg.push(t, "disks/slow", imageOf(t, layer))
	quick := reg.push(t, "disks/quick", image(t, map[string]string{"disk/disk.img": "quick"}))
	release := make(chan struct{})
	reg.mu.Lock()
	reg.stall[layerDigest(t, layer)] = release
	reg.mu.Unlock()
	dir := filepath.Join(t.TempDir(), "cache")
	c := &Cache{Dir: dir}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childDirEnv+"="+dir, childRefEnv+"="+slow)
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := waitTemp(t, dir)
	child.Process.Kill()
	child.Wait()
	t.Logf("killed the pull child while it wrote %s (output: %q)", killed, out.String())

	// A pull of the same image in this process, held half-way as well.
	done := make(chan error, 1)
	var live string
	go func() {
		p, err := c.Fetch(context.Background(), slow, "", k8sv1.PullIfNotPresent)
		if err == nil && read(t, p) != string(disk) {
			err = fmt.Errorf("the pulled disk %s differs from the image's", p)
		}
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); live == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second pull wrote no temporary file: %v", cacheLeft(t, dir))
		}
		for _, n := range cacheLeft(t, dir) {
			if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && strings.HasPrefix(n, ".pull-") && n != killed && fi.Size() > 0 {
				live = n
			}
		}
	}
	if _, err := c.Fetch(context.Background(), quick, "", k8sv1.PullIfNotPresent); err != nil {
		t.Fatalf("a pull beside the live one: %v", err)
	}
	left := strings.Join(cacheLeft(t, dir), " ")
	if strings.Contains(left, killed) {
		t.Errorf("the killed pull's %s is still in the cache after the next pull: %s", killed, left)
	}
	if !strings.Contains(left, live) {
		t.Errorf("the live pull's %s was removed by the next pull: %s", live, left)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the live pull: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the live pull did not complete")
	}
	for _, n := range cacheLeft(t, dir) {
		if strings.HasPrefix(n, ".") {
			t.Errorf("temporary file %s left once every pull is done", n)
		}
	}
}

// asUID reports whether uid can read p (test(1) run as uid: the kernel's
// own answer, ACLs and all).
func asUID(t *testing.T, uid int, p string) bool {
	t.Helper()
	cmd := exec.Command("test", "-r", p)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd.Run() == nil
}

// TestCachePrivate: what the cache holds (images pulled with root's
// registry credentials) is root's alone: the directory can be passed
// through (a run's uid reaches the file it is granted) but not listed,
// and no file in it is readable by another user, the virtlauncher user
// included. A cache a former version left open (0755, files 0644) is
// closed when next used.
func TestCachePrivate(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	ref := reg.push(t, "disks/private", image(t, map[string]string{"disk/disk.img": "secret disk"}))
	// The other user reaches the cache directory (t.TempDir's parent is
	// 0700): only the cache's own permissions keep it out.
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "cache")
	// A former version's cache: open to all.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, strings.Repeat("a", 64)+"-0123456789abcdef.img")
	if err := os.WriteFile(old, []byte("old disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Cache{Dir: dir}
	p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	other := 65534
	if u, err := exec.Command("id", "-u", "virtlauncher").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(u))); err == nil {
			other = n
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o711 {
		t.Errorf("cache directory mode %v, want 0711 (root's, passable, not listable)", fi.Mode().Perm())
	}
	if asUID(t, other, dir) {
		t.Errorf("uid %d can list the cache", other)
	}
	for _, n := range cacheLeft(t, dir) {
		f := filepath.Join(dir, n)
		fi, err := os.Lstat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: owner %d, mode %v; want root's alone (0600)", n, st.Uid, fi.Mode().Perm())
		}
		if asUID(t, other, f) {
			t.Errorf("uid %d can read %s", other, n)
		}
	}
	if !strings.HasPrefix(p, dir+"/") || read(t, p) != "secret disk" {
		t.Errorf("pulled %s", p)
	}
}

// TestFetchLayersAndIndex: the disk is the file the image's layers leave
// at its path, the top layer first (a file replaced, a file deleted by a
// whiteout, a directory made opaque), as a container runtime would show
// it; an index (here pinned by its digest) gives this machine's
// platform's image.
func TestFetchLayersAndIndex(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	layer := func(files ...string) ggcr.Layer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := 0; i < len(files); i += 2 {
			tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o444, Size: int64(len(files[i+1])), Typeflag: tar.TypeReg})
			tw.Write([]byte(files[i+1]))
		}
		tw.Close()
		return gzipLayer(t, gzipped(t, buf.Bytes(), 0))
	}
	c := &Cache{Dir: filepath.Join(t.TempDir(), "cache")}
	for _, tc := range []struct {
		name   string
		layers []ggcr.Layer
		want   string
	}{
		{"replaced", []ggcr.Layer{layer("disk/a.img", "lower"), layer("disk/a.img", "upper")}, "upper"},
		{"whiteout", []ggcr.Layer{layer("disk/a.img", "lower"), layer("disk/.wh.a.img", "", "disk/b.img", "b")}, "b"},
		{"opaque", []ggcr.Layer{layer("disk/a.img", "lower", "disk/c.img", "c"), layer("disk/.wh..wh..opq", "", "disk/b.img", "b")}, "b"},
	} {
		ref := reg.push(t, "disks/"+tc.name, imageOf(t, tc.layers...))
		p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
		if err != nil || read(t, p) != tc.want {
			t.Errorf("%s: %s, %v; want the disk %q", tc.name, p, err, tc.want)
		}
	}
	mine := imageOf(t, layer("disk/disk.img", "this platform's"))
	other := imageOf(t, layer("disk/disk.img", "another platform's"))
	arch := "arm64"
	if runtime.GOARCH == arch {
		arch = "amd64"
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: other, Descriptor: ggcr.Descriptor{Platform: &ggcr.Platform{OS: "linux", Architecture: arch}}},
		mutate.IndexAddendum{Add: mine, Descriptor: ggcr.Descriptor{Platform: &ggcr.Platform{OS: "linux", Architecture: runtime.GOARCH}}})
	r, err := name.ParseReference(reg.host + "/disks/index:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Fetch(context.Background(), reg.host+"/disks/index@"+d.String(), "", k8sv1.PullIfNotPresent)
	if err != nil || read(t, p) != "this platform's" {
		t.Errorf("an index: %s, %v; want this platform's disk", p, err)
	}
}

// TestFetchSameImageTwice: two pulls of one image at once (two runs
// started together): the one that completes first puts its disk in place,
// and a run may open it at once (its ACL entry is on that file); the
// other, completing later, leaves that file where it is rather than
// replacing it with its own copy, which the first run's QEMU, opening the
// path after its grant, could not read. A pull whose context is cancelled
// half-way leaves nothing.
func TestFetchSameImageTwice(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	disk := randomBytes(t, 1<<20)
	layer := gzipLayer(t, gzipped(t, tarOf(t, "disk/disk.img", disk, nil), 0))
	ref := reg.push(t, "disks/twice", imageOf(t, layer))
	ld := layerDigest(t, layer)
	release := make(chan struct{})
	reg.mu.Lock()
	reg.stall[ld] = release
	reg.mu.Unlock()
	dir := filepath.Join(t.TempDir(), "cache")
	c := &Cache{Dir: dir}

	// A pull cancelled half-way.
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, ref, "", k8sv1.PullAlways)
		cancelled <- err
	}()
	waitTemp(t, dir)
	cancel()
	if err := <-cancelled; err == nil || !strings.Contains(err.Error(), ref) {
		t.Errorf("a cancelled pull: %v, want its error naming %s", err, ref)
	}
	if left := cacheLeft(t, dir); len(left) > 0 {
		t.Errorf("left in the cache by a cancelled pull: %v", left)
	}

	// The first pull is held half-way; the second completes.
	first := make(chan error, 1)
	go func() {
		_, err := c.Fetch(context.Background(), ref, "", k8sv1.PullAlways)
		first <- err
	}()
	waitTemp(t, dir)
	reg.mu.Lock()
	delete(reg.stall, ld)
	reg.mu.Unlock()
	p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullAlways)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first pull: %v", err)
	}
	after, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("the pull that completed last replaced %s, which a run may already use", p)
	}
	if read(t, p) != string(disk) {
		t.Errorf("%s differs from the image's disk", p)
	}
	for _, n := range cacheLeft(t, dir) {
		if strings.HasPrefix(n, ".") {
			t.Errorf("temporary file %s left", n)
		}
	}
}

// TestFetchZstd: a zstd layer is pulled like a gzip one, and one whose
// bytes were changed (here: one byte, which breaks the zstd stream before
// its end) is refused as the digest mismatch it is, not as a damaged
// stream.
func TestFetchZstd(t *testing.T) {
	testenv.Root(t, "the image cache must be owned by root (Cache.Dir)")
	reg := newRegistry(t)
	disk := randomBytes(t, 256<<10)
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(tarOf(t, "disk/disk.img", disk, nil))
	zw.Close()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil },
		tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.push(t, "disks/zstd", imageOf(t, layer))
	c := &Cache{Dir: filepath.Join(t.TempDir(), "cache")}
	ld := layerDigest(t, layer)
	bad := bytes.Clone(buf.Bytes())
	bad[len(bad)/2] ^= 0xff
	reg.mu.Lock()
	reg.swap[ld] = bad
	reg.mu.Unlock()
	if p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent); err == nil || !strings.Contains(err.Error(), ld) || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("a changed zstd layer: %q, %v; want a refusal naming %s and \"digest mismatch\"", p, err, ld)
	} else {
		t.Logf("refused: %v", err)
	}
	reg.mu.Lock()
	delete(reg.swap, ld)
	reg.mu.Unlock()
	p, err := c.Fetch(context.Background(), ref, "", k8sv1.PullIfNotPresent)
	if err != nil || read(t, p) != string(disk) {
		t.Errorf("a zstd layer: %s, %v; want its disk", p, err)
	}
}
