package disks

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	testenv.Need(t, name, testenv.Installed(name))
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newPreparer(t testing.TB) (*Preparer, string) {
	t.Helper()
	dir := t.TempDir()
	return &Preparer{Layout: layout.Under(dir)}, dir
}

func vmiWith(vols ...v1.Volume) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "testvm", Namespace: "ns1"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain:  v1.DomainSpec{Firmware: &v1.Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223"}},
			Volumes: vols,
		},
	}
}

func containerDisk(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "example/" + name}}}
}

func TestImageFormat(t *testing.T) {
	p, dir := newPreparer(t)
	img := func(name string) string { return filepath.Join(dir, name) }
	run(t, "qemu-img", "create", "-q", "-f", "raw", img("raw"), "1M")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", img("qcow2"), "1M")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", img("raw"), "-F", "raw", img("qcow2-backing"))
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+img("datafile"), img("qcow2-datafile"), "1M")
	run(t, "qemu-img", "create", "-q", "-f", "vmdk", img("vmdk"), "1M")
	if err := os.WriteFile(img("text"), []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A qcow2 magic followed by garbage: qemu-img itself refuses it.
	bad := append([]byte("QFI\xfb\x00\x00\x00\x09"), bytes.Repeat([]byte{0xff}, 4088)...)
	if err := os.WriteFile(img("corrupt-qcow2"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img("empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(img("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want, errHas string
	}{
		{"raw", "raw", ""},
		{"qcow2", "qcow2", ""},
		{"qcow2-backing", "", "backing file"},
		{"qcow2-datafile", "", "external data file"},
		{"vmdk", "", `format "vmdk" is not supported`},
		{"text", "", "not a disk image"},
		{"corrupt-qcow2", "", "qemu-img info"},
		{"empty", "", "empty"},
		{"dir", "", "not a disk image"},
		{"missing", "", "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.ImageFormat(context.Background(), img(tc.name))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("ImageFormat = %q, %v; want error containing %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ImageFormat = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestImageFormatMemoryLimit shows the address-space limit reaches qemu-img:
// with a limit far too small for it to start, the probe fails.
func TestImageFormatMemoryLimit(t *testing.T) {
	p, dir := newPreparer(t)
	img := filepath.Join(dir, "raw")
	run(t, "qemu-img", "create", "-q", "-f", "raw", img, "1M")
	p.MemoryLimit = 4 << 20
	if _, err := p.ImageFormat(context.Background(), img); err == nil {
		t.Fatal("qemu-img info succeeded in 4 MiB of address space; the limit is not applied")
	}
}

func TestGatherContainerDisks(t *testing.T) {
	p, _ := newPreparer(t)
	l := p.Layout
	if err := os.MkdirAll(l.ContainerDiskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "create", "-q", "-f", "raw", l.ContainerDiskImage(0), "1M")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", l.ContainerDiskImage(2), "1M")
	vmi := vmiWith(containerDisk("rawdisk"),
		v1.Volume{Name: "empty", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}}},
		containerDisk("qcowdisk"))
	got, err := p.Gather(context.Background(), vmi)
	if err != nil {
		t.Fatal(err)
	}
	if got["rawdisk"].BackingFormat != "raw" || got["qcowdisk"].BackingFormat != "qcow2" {
		t.Fatalf("formats: %+v", got)
	}
	if _, ok := got["empty"]; !ok {
		t.Fatalf("no facts for the empty disk: %+v", got)
	}
	// A missing container disk names the volume.
	_, err = p.Gather(context.Background(), vmiWith(containerDisk("a"), containerDisk("missingdisk")))
	if err == nil || !strings.Contains(err.Error(), "volume missingdisk") || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing image: %v", err)
	}
}

// TestGatherDirectIO checks the O_DIRECT probe against the file system of
// the directory: a tmpfs (O_DIRECT only on newer kernels) and the test dir.
func TestGatherDirectIO(t *testing.T) {
	p, dir := newPreparer(t)
	tmpfs := filepath.Join(dir, "tmpfs")
	mountTmpfs(t, tmpfs, "1m")
	for _, d := range []string{dir, tmpfs} {
		want := openDirect(t, d)
		// The probe must see through directories that do not exist yet.
		if got := directIODir(filepath.Join(d, "not", "yet")); got != want {
			t.Errorf("directIODir(%s) = %v, O_DIRECT open works = %v", d, got, want)
		}
		left, _ := filepath.Glob(filepath.Join(d, ".directio-probe-*"))
		if len(left) != 0 {
			t.Errorf("probe left files: %v", left)
		}
	}
	p.Layout.EphemeralDiskDir = tmpfs
	if err := os.MkdirAll(p.Layout.ContainerDiskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "create", "-q", "-f", "raw", p.Layout.ContainerDiskImage(0), "1M")
	got, err := p.Gather(context.Background(), vmiWith(containerDisk("d")))
	if err != nil {
		t.Fatal(err)
	}
	if want := !(openDirect(t, tmpfs) && openDirect(t, dir)); got["d"].NoDirectIO != want {
		t.Errorf("NoDirectIO = %v, want %v", got["d"].NoDirectIO, want)
	}
}

func openDirect(t *testing.T, dir string) bool {
	t.Helper()
	f := filepath.Join(dir, "odirect-check")
	defer os.Remove(f)
	fd, err := syscall.Open(f, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_DIRECT, 0o600)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
}

func mountTmpfs(t testing.TB, dir, size string) {
	t.Helper()
	testenv.Root(t, "mounts a tmpfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "tmpfs", "-o", "size="+size, "vl-disks-test", dir)
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
}

func inode(t *testing.T, path string) (uint64, int64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino, st.Mtim.Nano()
}

func TestPrepareIdempotent(t *testing.T) {
	p, _ := newPreparer(t)
	l := p.Layout
	ctx := context.Background()
	if err := os.MkdirAll(l.ContainerDiskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", l.ContainerDiskImage(0), "2M")
	vmi := vmiWith(containerDisk("root"),
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("3Mi")}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/data/host.img", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("5Mi")}}},
		v1.Volume{Name: "cloudinit", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#!/bin/sh\necho hi\n"}}})
	vols, err := p.Gather(ctx, vmi)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(ctx, vmi, vols); err != nil {
		t.Fatal(err)
	}
	overlay := l.DiskOverlay("root")
	info := run(t, "qemu-img", "info", "-U", overlay)
	if !strings.Contains(info, "backing file: "+l.ContainerDiskImage(0)) || !strings.Contains(info, "backing file format: qcow2") {
		t.Fatalf("overlay:\n%s", info)
	}
	if info := run(t, "qemu-img", "info", l.EmptyDisk("scratch")); !strings.Contains(info, "file format: qcow2") || !strings.Contains(info, "3 MiB") {
		t.Fatalf("empty disk:\n%s", info)
	}
	host, err := l.HostDisk("host", "/data/host.img")
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil || st.Size != 5<<20 || st.Blocks != 0 {
		t.Fatalf("host disk: %v size %d blocks %d, want sparse 5 MiB", err, st.Size, st.Blocks)
	}
	for _, f := range []string{overlay, l.EmptyDisk("scratch"), host} {
		if fi, _ := os.Stat(f); fi.Mode().Perm() != imageMode {
			t.Errorf("%s mode %v", f, fi.Mode())
		}
	}

	// The guest writes to its disks.
	run(t, "qemu-io", "-c", "write -P 0xab 0 64k", overlay)
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xcd 0 64k", l.EmptyDisk("scratch"))
	run(t, "qemu-io", "-f", "raw", "-c", "write -P 0xef 0 64k", host)
	var before [3][2]int64
	for i, f := range []string{overlay, l.EmptyDisk("scratch"), host} {
		ino, mt := inode(t, f)
		before[i] = [2]int64{int64(ino), mt}
	}
	if _, err := p.Prepare(ctx, vmi, vols); err != nil {
		t.Fatal(err)
	}
	for i, f := range []string{overlay, l.EmptyDisk("scratch"), host} {
		ino, mt := inode(t, f)
		if before[i] != [2]int64{int64(ino), mt} {
			t.Errorf("%s was recreated by the second Prepare", f)
		}
	}
	run(t, "qemu-io", "-c", "read -P 0xab 0 64k", overlay)
	run(t, "qemu-io", "-f", "qcow2", "-c", "read -P 0xcd 0 64k", l.EmptyDisk("scratch"))
	run(t, "qemu-io", "-f", "raw", "-c", "read -P 0xef 0 64k", host)

	// Cleanup removes what Prepare made, but not the backing or host image.
	if err := p.Cleanup(vmi); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{overlay, filepath.Dir(overlay), l.EmptyDisk("scratch"), l.CloudInitNoCloudISO("ns1", "testvm"), filepath.Dir(l.CloudInitNoCloudISO("ns1", "testvm"))} {
		if _, err := os.Lstat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Cleanup (%v)", f, err)
		}
	}
	for _, f := range []string{l.ContainerDiskImage(0), host} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("Cleanup removed %s: %v", f, err)
		}
	}
}

func TestPrepareOwner(t *testing.T) {
	testenv.Root(t, "changes owners")
	p, _ := newPreparer(t)
	p.Owner = &Owner{UID: 4242, GID: 4343}
	vmi := vmiWith(v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}}},
		v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "x"}}})
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	iso := p.Layout.CloudInitNoCloudISO("ns1", "testvm")
	for _, f := range []string{p.Layout.EmptyDisk("scratch"), filepath.Dir(p.Layout.EmptyDisk("scratch")), iso, filepath.Dir(iso), filepath.Dir(filepath.Dir(iso))} {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 4242 || st.Gid != 4343 {
			t.Errorf("%s owned by %d:%d", f, st.Uid, st.Gid)
		}
	}
	if fi, _ := os.Stat(iso); fi.Mode().Perm() != readOnlyMode {
		t.Errorf("ISO mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Dir(iso)); fi.Mode().Perm() != dirMode {
		t.Errorf("dir mode %v", fi.Mode())
	}
}

func TestPrepareErrors(t *testing.T) {
	p, _ := newPreparer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		vol    v1.Volume
		vols   map[string]facts.Volume
		errHas string
	}{
		{"bad name", containerDisk("../etc"), nil, `"../etc" cannot be used as a file name`},
		{"slash name", v1.Volume{Name: "a/b", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}}}, nil, "cannot be used as a file name"},
		{"format not gathered", containerDisk("root"), nil, "volume root: containerDisk: backing image format unknown"},
		{"empty disk no capacity", v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}}, nil, "emptyDisk.capacity 0: must be positive"},
		{"host disk missing", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/x/disk.img", Type: v1.HostDiskExists}}}, nil, "does not exist (type Disk needs it to)"},
		{"host disk too big", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/x/disk.img", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Ei")}}}, nil, "exceeds the"},
		{"host disk no path", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Mi")}}}, nil, `hostDisk.path "": must name a file`},
		{"host disk root path", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/", Type: v1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Mi")}}}, nil, `hostDisk.path "/": must name a file`},
		{"bad base64", v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataBase64: "!!notbase64"}}}, nil, "cloudInitNoCloud.userDataBase64: not valid base64"},
		{"no user data", v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{}}}, nil, "is required"},
		{"missing secret", v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataSecretRef: &k8sv1.LocalObjectReference{Name: "s"}}}}, nil, "cloudInitNoCloud.secretRef s: none of userdata, userData found"},
		{"missing configmap dir", v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}}, nil, "configMap: source directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Prepare(ctx, vmiWith(tc.vol), tc.vols)
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("Prepare: %v; want error containing %q", err, tc.errHas)
			}
		})
	}
	if _, err := p.Gather(ctx, vmiWith(containerDisk(".."))); err == nil || !strings.Contains(err.Error(), "cannot be used as a file name") {
		t.Fatalf("Gather with name ..: %v", err)
	}
	// Nothing may be left behind by the failures above.
	var left []string
	_ = filepath.Walk(filepath.Dir(p.Layout.ShareDir), func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			left = append(left, path)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("files left after failed Prepare: %v", left)
	}
}

// TestPrepareDiskFull fills a small tmpfs: overlay, empty disk and ISO
// creation fail with ENOSPC and leave no file, not even a temporary one.
func TestPrepareDiskFull(t *testing.T) {
	p, dir := newPreparer(t)
	l := p.Layout
	ctx := context.Background()
	if err := os.MkdirAll(l.ContainerDiskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-img", "create", "-q", "-f", "raw", l.ContainerDiskImage(0), "1M")
	mountTmpfs(t, l.EphemeralDiskDir, "64k")
	mountTmpfs(t, l.LibvirtRunDir, "64k")
	big := strings.Repeat("#cloud-config with a lot of text\n", 4096) // 132 KiB
	for _, tc := range []struct {
		name string
		vol  v1.Volume
	}{
		{"overlay", containerDisk("root")},
		{"empty disk", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}}},
		{"nocloud iso workspace", v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: big}}}},
		// The source files fit; the ISO written after them does not.
		{"nocloud iso image", v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: big[:20<<10]}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := vmiWith(tc.vol)
			vols := map[string]facts.Volume{"root": {BackingFormat: "raw"}}
			_, err := p.Prepare(ctx, vmi, vols)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Prepare on a full disk: %v; want ENOSPC", err)
			}
			t.Logf("error: %v", err)
			for _, d := range []string{l.EphemeralDiskDir, l.LibvirtRunDir} {
				_ = filepath.Walk(d, func(path string, fi os.FileInfo, err error) error {
					if err == nil && !fi.IsDir() {
						t.Errorf("left behind: %s (%d bytes)", path, fi.Size())
					}
					return nil
				})
			}
		})
	}
	_ = dir
}

// TestPrepareCancelled: a cancelled context stops Prepare before any work.
func TestPrepareCancelled(t *testing.T) {
	p, _ := newPreparer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Prepare(ctx, vmiWith(v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}}}), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prepare with cancelled context: %v", err)
	}
	if _, err := os.Stat(p.Layout.EmptyDisk("e")); err == nil {
		t.Fatal("empty disk created despite cancellation")
	}
}

// TestPVCAndEphemeral: a filesystem PVC is its image file; an ephemeral
// volume gets an overlay over it that leaves the PVC untouched.
func TestPVCAndEphemeral(t *testing.T) {
	p, _ := newPreparer(t)
	l := p.Layout
	ctx := context.Background()
	for _, n := range []string{"data", "eph"} {
		if err := os.MkdirAll(filepath.Dir(l.PVCDisk(n)), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "qemu-img", "create", "-q", "-f", "raw", l.PVCDisk(n), "4M")
	}
	pvc := func(claim string) k8sv1.PersistentVolumeClaimVolumeSource {
		return k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: claim}
	}
	vmi := vmiWith(
		v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: pvc("c1")}}},
		v1.Volume{Name: "eph", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{PersistentVolumeClaim: &k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "c2"}}}},
		v1.Volume{Name: "hot", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv", Hotpluggable: true}}},
	)
	vols, err := p.Gather(ctx, vmi)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := vols["data"]; !ok || v.Block {
		t.Errorf("data: %+v %v", v, ok)
	}
	if v := vols["eph"]; v.BackingFormat != "raw" || v.Block {
		t.Errorf("eph: %+v", v)
	}
	if _, ok := vols["hot"]; ok {
		t.Error("facts for a hotplug volume that is not attached yet")
	}
	if _, err := p.Prepare(ctx, vmi, vols); err != nil {
		t.Fatal(err)
	}
	run(t, "qemu-io", "-c", "write -P 0x11 0 4k", l.DiskOverlay("eph"))
	run(t, "qemu-io", "-f", "raw", "-c", "read -P 0 0 4k", l.PVCDisk("eph"))
	if info := run(t, "qemu-img", "info", "-U", l.DiskOverlay("eph")); !strings.Contains(info, "backing file: "+l.PVCDisk("eph")) {
		t.Errorf("ephemeral overlay:\n%s", info)
	}

	// A block-mode PVC whose device node is missing is a clear error.
	block := k8sv1.PersistentVolumeBlock
	vmi.Status.VolumeStatus = []v1.VolumeStatus{{Name: "data", PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{VolumeMode: &block}}}
	if _, err := p.Gather(ctx, vmi); err == nil || !strings.Contains(err.Error(), "volume data: block volume: "+l.BlockDevice("data")+" is not a block device") {
		t.Errorf("Gather of a block PVC without its device: %v", err)
	}
	// So is a PVC with no image.
	vmi = vmiWith(v1.Volume{Name: "nothere", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: pvc("c3")}}})
	if _, err := p.Gather(ctx, vmi); err == nil || !strings.Contains(err.Error(), "volume nothere: neither block device "+l.BlockDevice("nothere")+" nor image") {
		t.Errorf("Gather of a missing PVC: %v", err)
	}
}

// TestPrepareIgnition: the kubevirt.io/ignitiondata annotation is written
// where the domain's fw_cfg entry reads it, readable by QEMU only through
// the owner; undo removes it, and a VMI without the annotation gets none.
func TestPrepareIgnition(t *testing.T) {
	p, _ := newPreparer(t)
	ctx := context.Background()
	data := `{"ignition":{"version":"3.3.0"}}`
	v := vmiWith()
	v.Annotations = map[string]string{v1.IgnitionAnnotation: data}
	undo, err := p.Prepare(ctx, v, nil)
	if err != nil {
		t.Fatal(err)
	}
	file := p.Layout.IgnitionFile("ns1", "testvm")
	got, err := os.ReadFile(file)
	if err != nil || string(got) != data {
		t.Fatalf("ignition file %s: %q, %v; want %q", file, got, err, data)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o640 {
		t.Errorf("ignition file mode %v, want 0640", fi.Mode().Perm())
	}
	undo()
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("undo left %s: %v", file, err)
	}
	if _, err := p.Prepare(ctx, vmiWith(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ignition file without the annotation: %v", err)
	}
}

// TestVirtiofsVolumesAreNoDisks: a configMap and a PVC shared by virtiofs
// filesystems are served by their virtiofsd, not read or imaged by the
// launcher: Gather gives them no facts and Prepare makes no ISO, even when
// the pod has no source directory or image for them (it has none in
// KubeVirt's pod: only the virtiofsd container mounts them).
func TestVirtiofsVolumesAreNoDisks(t *testing.T) {
	p, _ := newPreparer(t)
	ctx := context.Background()
	vmi := vmiWith(
		v1.Volume{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: k8sv1.LocalObjectReference{Name: "app"}}}},
		v1.Volume{Name: "shared", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}},
	)
	vmi.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "config", Virtiofs: &v1.FilesystemVirtiofs{}}, {Name: "shared", Virtiofs: &v1.FilesystemVirtiofs{}}}
	vols, err := p.Gather(ctx, vmi)
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	if len(vols) != 0 {
		t.Errorf("Gather gave facts for filesystem volumes: %+v", vols)
	}
	if _, err := p.Prepare(ctx, vmi, vols); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := os.Stat(p.Layout.ConfigMapISO("config")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an ISO for a virtiofs configMap: %v", err)
	}
}
