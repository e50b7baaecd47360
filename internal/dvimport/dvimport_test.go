package dvimport

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/ulikunitz/xz"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtlauncher/virtlauncher/internal/dvimport/dvtest"
	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// testDisk is a raw disk of size bytes with random data in its first MiB
// and last 4 KiB, zeros between, and the same disk as qcow2.
func testDisk(t *testing.T, size int64) (raw []byte, qcow2 []byte) {
	t.Helper()
	testenv.Programs(t, "qemu-img")
	raw = make([]byte, size)
	rand.Read(raw[:1<<20])
	rand.Read(raw[size-4096:])
	dir := t.TempDir()
	in, out := filepath.Join(dir, "d.raw"), filepath.Join(dir, "d.qcow2")
	if err := os.WriteFile(in, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", in, out).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, b)
	}
	qcow2, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return raw, qcow2
}

func xzOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// env is an importer with a cache of its own, and a volume directory.
type env struct {
	im     *Importer
	status *bytes.Buffer
	cache  string
	vols   *safefs.Dir
}

func newEnv(t *testing.T) env {
	t.Helper()
	testenv.Root(t, "the download cache is a directory of root's (safefs.OpenTrusted)")
	status := &bytes.Buffer{}
	cache := filepath.Join(t.TempDir(), "imports")
	vols, err := safefs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vols.Close() })
	im := &Importer{CacheDir: cache, Status: status, Stall: 2 * time.Second, Attempts: 3,
		Images: &registrydisk.Cache{Dir: filepath.Join(t.TempDir(), "images")}}
	return env{im: im, status: status, cache: cache, vols: vols}
}

func httpReq(e env, dv, url string, size int64) Request {
	return Request{DataVolume: dv, Field: "spec.dataVolumeTemplates[0].spec.source",
		Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: url}},
		Size:   size, Dir: e.vols, Name: dv + ".img"}
}

// volume is the volume file's content (nil when it does not exist).
func volume(t *testing.T, e env, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(e.vols.Join(name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// entries lists a directory (nil when it is missing).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// TestImportHTTPFormats: raw, qcow2 and their .gz and .xz forms each
// become the same raw volume, grown to the request; a second volume from
// the same URL is made from the cache after a 304, without a download.
func TestImportHTTPFormats(t *testing.T) {
	e := newEnv(t)
	srv := dvtest.New(t)
	const size = 8 << 20
	raw, qcow2 := testDisk(t, size)
	files := map[string][]byte{"d.raw": raw, "d.qcow2": qcow2, "d.raw.gz": gzipOf(t, raw), "d.qcow2.xz": xzOf(t, qcow2),
		"d.raw.xz": xzOf(t, raw), "d.qcow2.gz": gzipOf(t, qcow2)}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		url := srv.Put(name, files[name])
		dv := strings.ReplaceAll(name, ".", "-")
		fullBefore, _, _ := srv.Counts()
		if err := e.im.Import(context.Background(), httpReq(e, dv, url, 16<<20)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := volume(t, e, dv+".img")
		if int64(len(got)) != 16<<20 || !bytes.Equal(got[:size], raw) || !allZeros(got[size:]) {
			t.Errorf("%s: the volume is %d bytes, want the disk's %d grown to %d with zeros", name, len(got), size, 16<<20)
		}
		// The second volume: a conditional request, no download.
		if err := e.im.Import(context.Background(), httpReq(e, dv+"-2", url, 0)); err != nil {
			t.Fatalf("%s, again: %v", name, err)
		}
		if got := volume(t, e, dv+"-2.img"); !bytes.Equal(got, raw) {
			t.Errorf("%s, again: the volume (%d bytes) is not the disk (no request: the image's size)", name, len(got))
		}
		if full, _, _ := srv.Counts(); full != fullBefore+1 {
			t.Errorf("%s: the server sent the file %d times for two volumes, want once", name, full-fullBefore)
		}
	}
	if _, _, nm := srv.Counts(); nm != len(files) {
		t.Errorf("the server answered 304 %d times, want %d", nm, len(files))
	}
	if !strings.Contains(e.status.String(), "not modified since it was downloaded: using the cached copy") {
		t.Errorf("status does not say the cache was used:\n%s", e.status)
	}
	// A volume's file is 0600, root's, and nothing but volumes is left.
	for _, n := range entries(t, e.vols.Path()) {
		if strings.HasPrefix(n, ".") {
			t.Errorf("left %s in the volume directory", n)
		}
	}
	// The file changed on the server: downloaded again.
	raw2, _ := testDisk(t, size+1<<20)
	url := srv.Put("d.raw", raw2)
	if err := e.im.Import(context.Background(), httpReq(e, "changed", url, 0)); err != nil {
		t.Fatal(err)
	}
	if got := volume(t, e, "changed.img"); !bytes.Equal(got, raw2) {
		t.Errorf("a file changed on the server: the volume is not its new content")
	}
}

func allZeros(b []byte) bool { return !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) }

// TestImportResumes: a transfer broken off midway goes on with a Range
// request for the rest, and the volume is whole.
func TestImportResumes(t *testing.T) {
	e := newEnv(t)
	srv := dvtest.New(t)
	raw, qcow2 := testDisk(t, 8<<20)
	file := xzOf(t, qcow2)
	url := srv.Put("d.qcow2.xz", file)
	srv.Cut("d.qcow2.xz", int64(len(file)/2), true)
	if err := e.im.Import(context.Background(), httpReq(e, "resumed", url, 0)); err != nil {
		t.Fatal(err)
	}
	if got := volume(t, e, "resumed.img"); !bytes.Equal(got, raw) {
		t.Errorf("the resumed download's volume (%d bytes) is not the disk", len(got))
	}
	if full, ranged, _ := srv.Counts(); full != 1 || ranged != 1 {
		t.Errorf("the server answered %d full and %d range requests, want 1 and 1 (the rest of the file)", full, ranged)
	}
	if !strings.Contains(e.status.String(), "trying again from byte "+fmt.Sprint(len(file)/2)) {
		t.Errorf("status does not tell the resumption:\n%s", e.status)
	}
}

// TestImportErrors: each failure names the DataVolume, the URL and the
// reason, and leaves no volume, no temporary file and no download.
func TestImportErrors(t *testing.T) {
	e := newEnv(t)
	srv := dvtest.New(t)
	raw, qcow2 := testDisk(t, 8<<20)
	file := xzOf(t, qcow2)
	srv.Put("cut-always.xz", file)
	srv.Cut("cut-always.xz", int64(len(file)/3), false)
	srv.Put("truncated.qcow2.xz", file[:len(file)*2/3])
	srv.Put("page.html", []byte("<html>not a disk</html>\n"))
	srv.Put("big.raw", raw)
	srv.Put("archive.tar", tarOf(t, raw[:4096]))
	for _, c := range []struct {
		name, path string
		size       int64
		want       string
	}{
		{"notfound", "missing.qcow2", 0, "404 Not Found"},
		{"cut", "cut-always.xz", 0, fmt.Sprintf("gave up after 3 attempts, at byte %d of %d", len(file)/3, len(file))},
		{"truncated", "truncated.qcow2.xz", 0, "xz: unexpected EOF (a truncated or damaged file)"},
		{"notdisk", "page.html", 0, "not a disk image vlctl uses"},
		{"toobig", "big.raw", 4 << 20, "the image's virtual size, 8388608 bytes, is more than the 4194304 bytes the DataVolume requests"},
		{"tar", "archive.tar", 0, "a tar archive"},
	} {
		url := srv.URL + "/" + c.path
		err := e.im.Import(context.Background(), httpReq(e, c.name, url, c.size))
		if err == nil {
			t.Errorf("%s: imported, want an error saying %q", c.name, c.want)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "DataVolume "+c.name+":") || !strings.Contains(msg, url) || !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q; want it to name the DataVolume, %s and say %q", c.name, msg, url, c.want)
		}
		if left := entries(t, e.vols.Path()); len(left) > 0 {
			t.Errorf("%s: left %v in the volume directory", c.name, left)
		}
		for _, n := range entries(t, e.cache) {
			// An image downloaded whole and checked stays cached even
			// when it does not fit the request: the next try with more
			// storage needs no download.
			h := sha256.Sum256([]byte(srv.URL + "/big.raw"))
			kept := strings.HasPrefix(n, hex.EncodeToString(h[:12])+".")
			if !strings.HasSuffix(n, ".lock") && !kept {
				t.Errorf("%s: left %s in the download cache", c.name, n)
			}
		}
	}
	// A password in the URL is never shown.
	secret := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/missing.raw"
	if err := e.im.Import(context.Background(), httpReq(e, "secret", secret, 0)); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "user:xxxxx@") {
		t.Errorf("a URL with a password: error %v; want it shown as user:xxxxx", err)
	}
	// What a killed import left in the cache goes at the next import.
	for _, n := range []string{"0123.part", "0123.dec", "0123.lock"} {
		if err := os.WriteFile(filepath.Join(e.cache, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// An existing volume is never replaced.
	url := srv.Put("d.raw", raw)
	if err := os.WriteFile(e.vols.Join("exists.img"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.im.Import(context.Background(), httpReq(e, "exists", url, 0)); err == nil || !strings.Contains(err.Error(), "file exists") {
		t.Errorf("import over an existing file: %v, want it refused", err)
	}
	if got := volume(t, e, "exists.img"); string(got) != "mine" {
		t.Errorf("the existing file was changed")
	}
	for _, n := range []string{"0123.part", "0123.dec"} {
		if _, err := os.Stat(filepath.Join(e.cache, n)); err == nil {
			t.Errorf("%s, left by a killed import, is still in the cache", n)
		}
	}
}

func tarOf(t *testing.T, b []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "disk.img"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tar", "-C", dir, "-cf", "-", "disk.img").Output()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKindRefuses: sources with no meaning here are refused by name.
func TestKindRefuses(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, c := range []struct {
		src  cdiv1.DataVolumeSource
		want string
	}{
		{cdiv1.DataVolumeSource{S3: &cdiv1.DataVolumeSourceS3{URL: "s3://x"}}, "f.s3: vlctl does not import this source"},
		{cdiv1.DataVolumeSource{GCS: &cdiv1.DataVolumeSourceGCS{URL: "gs://x"}}, "f.gcs: vlctl does not import this source"},
		{cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}}, "f.upload: vlctl does not import this source"},
		{cdiv1.DataVolumeSource{Imageio: &cdiv1.DataVolumeSourceImageIO{}}, "f.imageio: vlctl does not import this source"},
		{cdiv1.DataVolumeSource{VDDK: &cdiv1.DataVolumeSourceVDDK{}}, "f.vddk: vlctl does not import this source"},
		{cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Name: "x"}}, "f.snapshot: vlctl does not import this source"},
		{cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "ftp://x/y"}}, `f.http.url "ftp://x/y": want an http:// or https:// URL`},
		{cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://x/y", SecretRef: "creds"}}, `f.http.secretRef "creds": vlctl has no Secrets`},
		{cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://x/y", CertConfigMap: "ca"}}, `f.http.certConfigMap "ca": vlctl has no ConfigMaps`},
		{cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://x/y", ExtraHeaders: []string{"bad"}}}, `f.http.extraHeaders[0]: "bad": want "Name: value"`},
		{cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: s("oci-archive://x")}}, `f.registry.url "oci-archive://x": want docker://IMAGE`},
		{cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{ImageStream: s("x")}}, "f.registry.imageStream: OpenShift image streams"},
		{cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: s("docker://x"), SecretRef: s("c")}}, `f.registry.secretRef "c": vlctl has no Secrets`},
	} {
		if _, err := Kind(&c.src, "f"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.src, err, c.want)
		}
	}
}

// TestImportRegistryBlankClone: a containerDisk from a registry (pulled
// through registrydisk, its digests checked), a blank volume of the
// request's size, and a clone of another volume.
func TestImportRegistryBlankClone(t *testing.T) {
	e := newEnv(t)
	raw, qcow2 := testDisk(t, 4<<20)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/containerdisks/test:v1"
	pushDisk(t, ref, qcow2)
	rreq := Request{DataVolume: "fromreg", Field: "f", Size: 8 << 20, Dir: e.vols, Name: "fromreg.img",
		Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr("docker://" + ref)}}}
	if err := e.im.Import(context.Background(), rreq); err != nil {
		t.Fatal(err)
	}
	got := volume(t, e, "fromreg.img")
	if len(got) != 8<<20 || !bytes.Equal(got[:4<<20], raw) || !allZeros(got[4<<20:]) {
		t.Errorf("the registry volume (%d bytes) is not the disk grown to 8 MiB", len(got))
	}
	missing := rreq
	missing.DataVolume, missing.Name = "nosuch", "nosuch.img"
	missing.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr("docker://" + ref + "x")}}
	if err := e.im.Import(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "DataVolume nosuch: import from "+ref+"x") {
		t.Errorf("a missing image: %v", err)
	}
	blank := Request{DataVolume: "empty", Field: "f", Size: 4 << 20, Dir: e.vols, Name: "empty.img", Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}}
	if err := e.im.Import(context.Background(), blank); err != nil {
		t.Fatal(err)
	}
	if got := volume(t, e, "empty.img"); len(got) != 4<<20 || !allZeros(got) {
		t.Errorf("the blank volume is %d bytes, not 4 MiB of zeros", len(got))
	}
	clone := Request{DataVolume: "copy", Field: "f", Dir: e.vols, Name: "copy.img", CloneFrom: e.vols.Join("fromreg.img"),
		Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "default", Name: "fromreg"}}}
	if err := e.im.Import(context.Background(), clone); err != nil {
		t.Fatal(err)
	}
	if got := volume(t, e, "copy.img"); !bytes.Equal(got, volume(t, e, "fromreg.img")) {
		t.Errorf("the clone is not its source")
	}
	if left := entries(t, e.vols.Path()); len(left) != 3 {
		t.Errorf("the volume directory holds %v, want the three volumes", left)
	}
}

func ptr(s string) *string { return &s }

// pushDisk pushes a containerDisk image holding disk as disk/disk.img.
func pushDisk(t *testing.T, ref string, disk []byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "disk/", Typeflag: tar.TypeDir, Mode: 0o555})
	tw.WriteHeader(&tar.Header{Name: "disk/disk.img", Typeflag: tar.TypeReg, Mode: 0o444, Size: int64(len(disk))})
	tw.Write(disk)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

// TestImportRegistryMismatch: a registry whose layer's bytes do not match
// its digest (a proxy flips a byte of every large blob) fails the import
// naming the DataVolume, the image and the mismatch; no volume is left.
func TestImportRegistryMismatch(t *testing.T) {
	e := newEnv(t)
	_, qcow2 := testDisk(t, 4<<20)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/containerdisks/test:v1"
	pushDisk(t, ref, qcow2)
	target, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		if !strings.Contains(r.Request.URL.Path, "/blobs/") || r.ContentLength < 4096 {
			return nil
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		r.Body.Close()
		b[len(b)/2] ^= 0xff
		r.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	bad := httptest.NewServer(proxy)
	defer bad.Close()
	badRef := strings.TrimPrefix(bad.URL, "http://") + "/containerdisks/test:v1"
	req := Request{DataVolume: "tampered", Field: "f", Dir: e.vols, Name: "tampered.img",
		Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr("docker://" + badRef)}}}
	err = e.im.Import(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "DataVolume tampered: import from "+badRef) || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("a layer not matching its digest: %v; want an error naming the DataVolume, %s and the mismatch", err, badRef)
	}
	if left := entries(t, e.vols.Path()); len(left) > 0 {
		t.Errorf("left %v in the volume directory", left)
	}
}
