package standalone_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ulikunitz/xz"

	"github.com/virtlauncher/virtlauncher/internal/dvimport/dvtest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// dvVM is a VirtualMachine booting the test guest's kernel with its root
// disk from a DataVolume imported over HTTP, as the "VM with a
// DataVolume" tutorials have it (no --volume).
const dvVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: NAME
spec:
  runStrategy: Once
  dataVolumeTemplates:
  - metadata:
      name: rootdv
    spec:
      source:
        http:
          url: URL
      storage:
        resources:
          requests:
            storage: 64Mi
  template:
    spec:
      terminationGracePeriodSeconds: 10
      domain:
        firmware:
          kernelBoot:
            kernelArgs: "CMDLINE"
            container:
              image: KERNELDIR
              kernelPath: /vmlinuz
              initrdPath: /initrd.img
        resources:
          requests:
            memory: 256Mi
        devices:
          autoattachPodInterface: false
          disks:
          - name: rootdisk
            disk: {bus: virtio}
      volumes:
      - name: rootdisk
        dataVolume:
          name: rootdv
`

// TestVlctlRunImportsDataVolume: a VM whose dataVolumeTemplate names a
// qcow2.xz of the test guest's root disk on a web server (standing in for
// the internet, its first transfer cut midway) boots from the imported
// volume, which vlctl keeps in its volume store: the download resumed
// with a Range request; a second VM of the same URL gets its own volume
// without a download (the server answers 304); the first VM's next run
// uses its volume as the guest left it, with no request; a URL that is
// not there fails the run naming the DataVolume and the URL, leaving no
// volume.
func TestVlctlRunImportsDataVolume(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	g := e.guest
	qcow2 := filepath.Join(t.TempDir(), "root.qcow2")
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", g.RootDisk, qcow2).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v: %s", err, out)
	}
	image := xzFile(t, qcow2)
	srv := dvtest.New(t)
	url := srv.Put("root.qcow2.xz", image)
	srv.Cut("root.qcow2.xz", int64(len(image)/2), true)
	store, cache := filepath.Join(e.dir, "store"), filepath.Join(e.dir, "imports")
	cmdline := testguest.DefaultCmdline + " " + testguest.OptPowerOff + " " + testguest.OptNoDHCP
	manifest := func(name, url string) string {
		return e.write(t, name, strings.NewReplacer("NAME", name, "URL", url, "CMDLINE", cmdline, "KERNELDIR", g.KernelDir).Replace(dvVM))
	}
	run := func(name, url string, args ...string) (int, string, string) {
		args = append([]string{"--volume-store", store, "--import-cache", cache}, args...)
		return vlctl(t, 4*time.Minute, e.run(append(args, manifest(name, url))...)...)
	}
	mapped := filepath.Join(e.dir, "mapped.img")
	for i, c := range []struct {
		vm                        string
		args                      []string
		full, ranged, notModified int // the server's answers after the run
		boots                     string
		vol                       string // where the volume is ("": the store)
	}{
		{"dvfirst", nil, 1, 1, 0, "1", ""},  // downloaded, resumed once
		{"dvsecond", nil, 1, 1, 1, "1", ""}, // from the cache: 304
		{"dvfirst", nil, 1, 1, 1, "2", ""},  // its volume, kept: no request
		// Into the file --volume names: from the cache again.
		{"dvmapped", []string{"--volume", "rootdv=" + mapped}, 1, 1, 2, "1", mapped},
	} {
		code, stdout, stderr := run(c.vm, url, c.args...)
		if code != 0 {
			t.Fatalf("run %d (%s): exit %d; stderr:\n%s", i+1, c.vm, code, stderr)
		}
		if _, ok := testguest.FindMarker(stdout, testguest.MarkerRootMounted); !ok {
			t.Errorf("run %d (%s): the guest found no root disk; console:\n%s", i+1, c.vm, stdout)
		}
		if n, _ := testguest.FindMarker(stdout, testguest.MarkerBootCount); n != c.boots {
			t.Errorf("run %d (%s): boot count %q, want %s (a volume of its own, kept between runs)", i+1, c.vm, n, c.boots)
		}
		if full, ranged, nm := srv.Counts(); full != c.full || ranged != c.ranged || nm != c.notModified {
			t.Errorf("run %d (%s): the server answered %d whole, %d range, %d not-modified requests; want %d, %d, %d\nstderr:\n%s",
				i+1, c.vm, full, ranged, nm, c.full, c.ranged, c.notModified, stderr)
		}
		vol := c.vol
		if vol == "" {
			vol = filepath.Join(store, "default", c.vm, "rootdv.img")
		}
		if st, err := os.Stat(vol); err != nil || st.Size() != 64<<20 || st.Mode().Perm() != 0o600 {
			t.Errorf("run %d: volume %s: %v, %v; want 64 MiB, 0600", i+1, vol, st, err)
		}
		if i == 0 && !strings.Contains(stderr, "vlctl: DataVolume rootdv: imported "+url+" into "+vol) {
			t.Errorf("run 1: stderr does not tell the import:\n%s", stderr)
		}
	}
	if st, err := os.Stat(store); err != nil || st.Mode().Perm() != 0o711 {
		t.Errorf("volume store %s: %v, %v; want 0711", store, st, err)
	}
	missing := srv.URL + "/missing.qcow2.xz"
	code, _, stderr := run("dvbad", missing)
	if want := "DataVolume rootdv: import from " + missing + ": GET " + missing + ": 404 Not Found"; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("a missing URL: exit %d, stderr %q; want a failure saying %q", code, stderr, want)
	}
	if left, _ := os.ReadDir(filepath.Join(store, "default", "dvbad")); len(left) > 0 {
		t.Errorf("a failed import left %v in the store", left)
	}
	e.checkNothingLeft(t)
}

// xzFile is the file at p, xz-compressed.
func xzFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
