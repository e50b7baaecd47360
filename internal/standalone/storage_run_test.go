package standalone_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// keepVM is a VirtualMachine whose guest writes a token to the start of
// every disk with a serial starting "p-" and prints what was there before
// ("VL-PREV <serial> <data|none>"), then powers off. Its disks: the
// containerDisk root (the guest counts its boots on it), a hostDisk of type
// Disk, a DiskOrCreate hostDisk, a PVC and a DataVolume from a template.
const keepVM = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: keep
spec:
  runStrategy: STRATEGY
  dataVolumeTemplates:
  - metadata:
      name: dv1
    spec:
      source:
        blank: {}
      storage:
        resources:
          requests:
            storage: 24Mi
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
          - name: hd
            serial: p-hd
            disk: {bus: virtio}
          - name: hdnew
            serial: p-hdnew
            disk: {bus: virtio}
          - name: pvc
            serial: p-pvc
            disk: {bus: virtio}
          - name: dv
            serial: p-dv
            disk: {bus: virtio}
          - name: cloudinit
            disk: {bus: virtio}
      volumes:
      - name: rootdisk
        containerDisk:
          image: ROOTDISK
      - name: hd
        hostDisk:
          path: DIR/hd.img
          type: Disk
      - name: hdnew
        hostDisk:
          path: DIR/hdnew.img
          type: DiskOrCreate
          capacity: 48Mi
      - name: pvc
        persistentVolumeClaim:
          claimName: claim1
      - name: dv
        dataVolume:
          name: dv1
      - name: cloudinit
        cloudInitNoCloud:
          userData: |
            #!/bin/sh
            for b in /sys/block/vd*; do
              s=$(cat $b/serial 2>/dev/null)
              case "$s" in p-*) ;; *) continue ;; esac
              d=/dev/${b##*/}
              prev=$(head -c 32 $d | tr -cd 'A-Za-z0-9-')
              echo "VL-PREV $s ${prev:-none}"
              printf 'VLDATA-%s-TOKEN' "$s" | dd of=$d conv=notrunc 2>/dev/null
            done
            sync
`

// keepEnv is a test's user directory, work root and record dir. The
// record dir is the test's own: every vlctl run cleans up after stale
// records at its start, and with the default dir shared by the package's
// parallel tests one test's leftovers became another's output (CI: a
// storage test's one-line error preceded by gc lines about another run).
type keepEnv struct {
	dir, root, records string
	guest              *testguest.Guest
	doc                func(strategy, token string) string
}

func newKeepEnv(t *testing.T) keepEnv {
	t.Helper()
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	// The user's own directory: root's, open for QEMU's user to enter.
	dir := userDir(t, "vlkeep")
	cmdline := testguest.DefaultCmdline + " " + testguest.OptPowerOff + " " + testguest.OptNoDHCP
	return keepEnv{dir: dir, root: workRoot(t), records: workRoot(t), guest: g, doc: func(strategy, token string) string {
		return strings.NewReplacer("STRATEGY", strategy, "TOKEN", token, "CMDLINE", cmdline, "KERNELDIR", g.KernelDir,
			"ROOTDISK", g.RootDisk, "DIR", dir).Replace(keepVM)
	}}
}

// userDir makes a directory of root's that QEMU's user can enter, as a
// user's own is (t.TempDir's parent is 0700), named prefix and a suffix;
// it is removed at the test's end.
func userDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run is the start of a `vlctl run` command line in this environment,
// with the user's directory allowed for the manifest's hostDisks (a run
// taking a guest over by migration uses its source's without it).
func (e keepEnv) run(args ...string) []string {
	base := []string{"run", "--emulation", "--workdir", e.root, "--record-dir", e.records}
	if !slices.Contains(args, "--migrate-from") {
		base = append(base, "--allow-host-path", e.dir)
	}
	return append(base, args...)
}

// checkNothingLeft: nothing of the environment's runs is left: no work
// dir, process, record or uid lease.
func (e keepEnv) checkNothingLeft(t *testing.T) {
	t.Helper()
	checkNothingLeft(t, e.root)
	if left, err := runrecord.List(e.records); err != nil || len(left) != 0 {
		for _, r := range left {
			st, serr := procfs.ReadStat("/proc", r.PID)
			t.Errorf("record %s left (stale %v): pid %d start %d; /proc says %+v %v", r.Path, r.Stale, r.PID, r.PIDStart, st, serr)
		}
		if err != nil {
			t.Errorf("records: %v", err)
		}
	}
	checkLeasesGone(t, e.records)
}

func (e keepEnv) write(t *testing.T, name, doc string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestVlctlRunKeepsData: what the guest writes to a hostDisk (Disk and
// DiskOrCreate), a PVC and a DataVolume mapped with --volume is there on the
// next run; its containerDisk overlay is not. The files are at the user's
// paths with the sizes asked for, and nothing vlctl added stays: no ACL
// entry, no mode change, no work dir, no process.
func TestVlctlRunKeepsData(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	hd := filepath.Join(e.dir, "hd.img")
	if err := os.WriteFile(hd, make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	vols := []string{"--volume", "claim1=" + filepath.Join(e.dir, "pvc.img") + ",size=40Mi", "--volume", "dv1=" + filepath.Join(e.dir, "dv.img")}
	serials := []string{"p-hd", "p-hdnew", "p-pvc", "p-dv"}
	for run, token := range []string{"first", "second"} {
		file := e.write(t, token, e.doc("Once", token))
		start := time.Now()
		code, stdout, stderr := vlctl(t, 4*time.Minute, e.run(append(vols, file)...)...)
		t.Logf("run %d took %s", run+1, time.Since(start).Round(time.Millisecond))
		out := strings.ReplaceAll(stdout, "\r\n", "\n")
		if code != 0 {
			t.Fatalf("run %d: exit %d\nstderr:\n%s\nstdout:\n%s", run+1, code, stderr, stdout)
		}
		for _, s := range serials {
			prev := "none"
			if run == 1 {
				prev = "VLDATA-" + s + "-first"
			}
			if line := "VL-PREV " + s + " " + prev + "\n"; !strings.Contains(out, line) {
				t.Errorf("run %d: console lacks %q", run+1, strings.TrimSpace(line))
			}
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "VL-PREV") || strings.HasPrefix(l, testguest.MarkerBootCount) {
				t.Logf("run %d: %s", run+1, l)
			}
		}
		// The containerDisk's overlay is new on every run.
		if !strings.Contains(out, testguest.MarkerBootCount+" 1\n") {
			t.Errorf("run %d: the root disk (containerDisk) does not count its first boot", run+1)
		}
		// Sizes the guest sees: 48Mi (capacity), 40Mi (size=), 24Mi (the
		// template's request), 16Mi (the existing file).
		for s, sectors := range map[string]int{"p-hd": 16 << 11, "p-hdnew": 48 << 11, "p-pvc": 40 << 11, "p-dv": 24 << 11} {
			if !strings.Contains(out, fmt.Sprintf(" size %d ro 0 serial %s\n", sectors, s)) {
				t.Errorf("run %d: the guest does not see %s with %d sectors", run+1, s, sectors)
			}
		}
		if strings.Contains(stderr, "boot disk") {
			t.Errorf("run %d: warned of a blank boot disk; the guest boots from its containerDisk:\n%s", run+1, stderr)
		}
		if run == 0 && !strings.Contains(stderr, "created "+filepath.Join(e.dir, "hdnew.img")) {
			t.Errorf("vlctl did not say it created hdnew.img:\n%s", stderr)
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			return
		}
	}
	for name, size := range map[string]int64{"hd.img": 16 << 20, "hdnew.img": 48 << 20, "pvc.img": 40 << 20, "dv.img": 24 << 20} {
		p := filepath.Join(e.dir, name)
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if st.Size() != size {
			t.Errorf("%s is %d bytes, want %d", name, st.Size(), size)
		}
		if st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: mode %v uid %d after the runs, want 0600 root's", name, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid)
		}
		if _, err := unix.Getxattr(p, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s: an ACL is left (%v)", name, err)
		}
	}
	e.checkNothingLeft(t)
}

// TestVlctlRunStorageRefused: a run whose storage cannot be had fails
// before the guest starts with one line naming the user's path or field,
// and leaves nothing: no file it was not asked for, none it created for
// this run, no link, no work dir.
func TestVlctlRunStorageRefused(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	closed := filepath.Join(e.dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	hd := filepath.Join(e.dir, "hd.img")
	pvc := "claim1=" + filepath.Join(e.dir, "pvc.img") + ",size=8Mi"
	for _, tc := range []struct {
		name    string
		strat   string
		noHD    bool // hd.img (type Disk) does not exist
		noAllow bool // no --allow-host-path
		volume  []string
		want    []string
	}{
		{name: "hostDisks without --allow-host-path", strat: "Once", noAllow: true, volume: []string{pvc, "dv1=" + filepath.Join(e.dir, "dv.img")},
			want: []string{"spec.template.spec.volumes[1].hostDisk.path", hd, `(volume "hd")`, "--allow-host-path " + e.dir}},
		{name: "PVC without a mapping", strat: "Once", volume: []string{"dv1=" + filepath.Join(e.dir, "dv.img")},
			want: []string{"spec.template.spec.volumes[3]", `persistentVolumeClaim "claim1"`, "--volume claim1=PATH"}},
		{name: "hostDisk Disk missing", strat: "Once", noHD: true, volume: []string{pvc, "dv1=" + filepath.Join(e.dir, "dv.img")},
			want: []string{"spec.template.spec.volumes[1].hostDisk.path", hd, "does not exist"}},
		{name: "PVC file missing without a size", strat: "Once", volume: []string{"claim1=" + filepath.Join(e.dir, "pvc.img"), "dv1=" + filepath.Join(e.dir, "dv.img")},
			want: []string{"--volume claim1", filepath.Join(e.dir, "pvc.img"), "size="}},
		// hdnew.img and pvc.img are made before dv1 fails: both go again.
		{name: "DataVolume in a directory QEMU cannot enter", strat: "Once", volume: []string{pvc, "dv1=" + filepath.Join(closed, "dv.img")},
			want: []string{"--volume dv1", filepath.Join(closed, "dv.img"), closed + " is closed to it"}},
		{name: "a mapping the manifest does not use", strat: "Once", volume: []string{pvc, "dv1=" + filepath.Join(e.dir, "dv.img"), "nosuch=/x.img"},
			want: []string{"--volume nosuch", `no persistentVolumeClaim or dataVolume named "nosuch"`}},
		{name: "Halted", strat: "Halted", volume: []string{pvc, "dv1=" + filepath.Join(e.dir, "dv.img")},
			want: []string{"spec.runStrategy: Halted", "--force-start"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(hd)
			if !tc.noHD {
				if err := os.WriteFile(hd, make([]byte, 1<<20), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			file := e.write(t, "bad", e.doc(tc.strat, "x"))
			before := listDir(t, e.dir)
			args := e.run()
			if tc.noAllow {
				args = slices.DeleteFunc(args, func(a string) bool { return a == "--allow-host-path" || a == e.dir })
			}
			for _, v := range tc.volume {
				args = append(args, "--volume", v)
			}
			code, stdout, stderr := vlctl(t, time.Minute, append(args, file)...)
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			msg := oneLineError(t, stderr, tc.want...)
			if strings.Contains(msg, e.root) {
				t.Errorf("error names the work dir, not the user's path: %s", msg)
			}
			if stdout != "" {
				t.Errorf("printed %q on stdout", stdout)
			}
			if after := listDir(t, e.dir); after != before {
				t.Errorf("the user's directory changed:\n%s\nnow:\n%s", before, after)
			}
			e.checkNothingLeft(t)
		})
	}
}

// listDir describes the entries of dir: name, size, mode and ACL.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, en := range ents {
		p := filepath.Join(dir, en.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		n, _ := unix.Getxattr(p, "system.posix_acl_access", make([]byte, 256))
		fmt.Fprintf(&b, "%s %d %v acl=%d\n", en.Name(), fi.Size(), fi.Mode(), n)
	}
	return b.String()
}

// TestVlctlRunBlockPVC: --volume CLAIM=/dev/... gives the guest a block
// device as a block PVC: it reads what was there and its write reaches the
// device. The device node's permissions are as before afterwards.
func TestVlctlRunBlockPVC(t *testing.T) {
	needRoot(t)
	testenv.Programs(t, "losetup")
	t.Parallel()
	e := newKeepEnv(t)
	backing := filepath.Join(e.dir, "loop.img")
	if err := os.WriteFile(backing, append([]byte("VLDATA-p-pvc-first"), make([]byte, 32<<20-18)...), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).Output()
	if err != nil {
		testenv.Need(t, "a loop device", fmt.Errorf("losetup: %w", err))
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	before, err := os.Stat(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "hd.img"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	file := e.write(t, "blk", e.doc("Once", "blk"))
	code, stdout, stderr := vlctl(t, 4*time.Minute, e.run(
		"--volume", "claim1="+dev, "--volume", "dv1="+filepath.Join(e.dir, "dv.img"), file)...)
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if !strings.Contains(strings.ReplaceAll(stdout, "\r\n", "\n"), "VL-PREV p-pvc VLDATA-p-pvc-first\n") {
		t.Errorf("the guest did not read the device's data:\n%s", stdout)
	}
	exec.Command("losetup", "-d", dev).Run() // flushes the loop device
	b := make([]byte, 16)
	f, err := os.Open(backing)
	if err != nil {
		t.Fatal(err)
	}
	f.Read(b)
	f.Close()
	if string(b) != "VLDATA-p-pvc-blk" {
		t.Errorf("the device starts with %q after the run, want the guest's VLDATA-p-pvc-blk", b)
	}
	after, err := os.Stat(dev)
	if err == nil && after.Mode() != before.Mode() {
		t.Errorf("%s: mode %v after the run, was %v", dev, after.Mode(), before.Mode())
	}
	if _, err := unix.Getxattr(dev, "system.posix_acl_access", make([]byte, 256)); err == nil {
		t.Errorf("%s: an ACL is left", dev)
	}
	e.checkNothingLeft(t)
}
