package reliability

// Root acting on paths the launcher's user controls: root must never act
// through a path a less privileged user can change.
// `vlctl run` (internal/standalone) runs as root and hands a work dir to the
// launcher's user, the one every QEMU runs as. These tests plant symbolic
// links where root writes, as that user (a fake monitor, and a swapper
// racing the hand-over) or before root writes, and check that root refuses
// or never follows them: nothing outside the run's tree changes and nothing
// is left behind. They need root and a non-root user (virtlauncher, else
// nobody), not the test guest: the monitor is a script.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// linkUser is the unprivileged user the links are planted as: the id a
// run's VM gets (vlctl run --uids ID-ID), with no account, as vlctl's own.
type linkUser struct {
	name     string
	uid, gid int
}

// needLinkUser picks an id for the test, above vlctl's default range so
// that no run of other tests takes it, and apart for each test process.
func needLinkUser(t *testing.T) linkUser {
	t.Helper()
	testenv.Root(t, "vlctl run's root side is what is tested")
	id := 1879200000 + 4*(os.Getpid()%100000)
	return linkUser{fmt.Sprintf("uid %d", id), id, id}
}

// uids is the --uids range of exactly u's id.
func (u linkUser) uids() string { return fmt.Sprintf("%d-%d", u.uid, u.uid) }

// canary is a root-owned directory outside any run's tree, the target of
// every planted link; it must never change.
type canary struct {
	dir    string
	before map[string]string
}

func newCanary(t *testing.T) *canary {
	t.Helper()
	c := &canary{dir: testenv.OpenDir(t)}
	if err := os.Mkdir(filepath.Join(c.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"secret": 0o600, "sub/conf": 0o644} {
		if err := os.WriteFile(filepath.Join(c.dir, p), []byte("root's own "+p+"\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	c.before = c.state(t)
	return c
}

// state is every entry below the canary with its owner, mode and content.
func (c *canary) state(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			m[p] = err.Error()
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			m[p] = err.Error()
			return nil
		}
		sys := st.Sys().(*syscall.Stat_t)
		v := fmt.Sprintf("%d:%d %v", sys.Uid, sys.Gid, st.Mode())
		if st.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		m[p] = v
		return nil
	})
	return m
}

func (c *canary) untouched(t *testing.T) {
	t.Helper()
	after := c.state(t)
	for p, v := range c.before {
		if after[p] != v {
			t.Errorf("outside the run's tree, %s changed: %q, was %q", p, after[p], v)
		}
	}
	for p := range after {
		if _, ok := c.before[p]; !ok {
			t.Errorf("outside the run's tree, %s appeared", p)
		}
	}
}

// userDir is a directory the user can write, for its notes.
func userDir(t *testing.T, u linkUser) string {
	t.Helper()
	d := filepath.Join(testenv.OpenDir(t), "notes")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	return d
}

// shortWorkRoot is a --workdir under /run: socket paths below a work dir
// leave only a few bytes for it.
func shortWorkRoot(t *testing.T) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		d := fmt.Sprintf("/run/vq%04x", time.Now().UnixNano()&0xffff)
		if err := os.Mkdir(d, 0o755); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	t.Fatal("no free short directory under /run")
	return ""
}

// linkRun is one `vlctl run` (standalone.Run, as root) whose
// virt-launcher-monitor is the script monitor, run as the user.
type linkRun struct {
	u        linkUser
	uids     string // --uids of the run (u's id alone by default)
	workRoot string
	manifest string
	binDir   string
}

// newLinkRun prepares a manifest with a containerDisk and a kernelBoot
// image (links root makes) and the pod network with bridge binding (the
// resolv.conf, vif cache and restore state root writes), and a bin dir
// the user cannot reach, so root copies the binaries into the work dir.
func newLinkRun(t *testing.T, u linkUser, monitor string) *linkRun {
	t.Helper()
	img := testenv.OpenDir(t)
	kernel := filepath.Join(img, "kernel")
	if err := os.Mkdir(kernel, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"disk.img", "kernel/vmlinuz", "kernel/initrd.img"} {
		if err := os.WriteFile(filepath.Join(img, f), []byte("image\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := filepath.Join(t.TempDir(), "vmi.yaml")
	if err := os.WriteFile(manifest, []byte(testguest.Manifest{
		Meta:    testguest.Meta{Name: "rootlinks", Namespace: "default"},
		Boot:    testguest.Boot{Kernel: kernel},
		Sizing:  testguest.Sizing{Memory: "64Mi"},
		Disks:   testguest.Disks{Root: filepath.Join(img, "disk.img")},
		Network: testguest.Network{AutoattachPod: true},
	}.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir() // below a 0700 directory
	for _, name := range []string{"virt-launcher-monitor", "virt-launcher"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(monitor), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &linkRun{u: u, uids: u.uids(), workRoot: shortWorkRoot(t), manifest: manifest, binDir: bin}
}

func (l *linkRun) run(t *testing.T) (string, error) {
	t.Helper()
	return l.runWith(testenv.OpenDir(t), nil)
}

// runWith runs the manifest (standalone.Run, as root) with the script
// monitor, its record in recordDir; edit, when set, adds to the run's
// configuration. It returns the run's status lines.
func (l *linkRun) runWith(recordDir string, edit func(*standalone.Config)) (string, error) {
	var status strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := standalone.Config{
		ManifestOptions: standalone.ManifestOptions{File: l.manifest, Binding: "bridge"},
		HostOptions: standalone.HostOptions{WorkRoot: l.workRoot, UIDs: l.uids, BinDir: l.binDir,
			CapsCache: "none", RecordDir: recordDir},
		HardwareOptions: standalone.HardwareOptions{Emulation: true},
		TerminalOptions: standalone.TerminalOptions{Console: &strings.Builder{}},
		ReportOptions:   standalone.ReportOptions{Status: &status},
	}
	if edit != nil {
		edit(&cfg)
	}
	err := standalone.Run(ctx, cfg)
	return status.String(), err
}

// nothingLeft: the work root is empty and no process works below it.
func (l *linkRun) nothingLeft(t *testing.T) {
	t.Helper()
	if ents, _ := os.ReadDir(l.workRoot); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("work root %s not empty: %v", l.workRoot, names)
	}
	procs, err := procfs.Under("/proc", l.workRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		t.Errorf("process %d (%s) left behind below %s", p.PID, p.Comm, l.workRoot)
	}
}

// attackMonitor is the launcher's user's side: started by vlctl run as
// virt-launcher-monitor (cwd the work dir, output launcher.log), it notes
// what root staged, then tries to plant a link at every path root wrote or
// acts on later, and ends as a failed launcher would.
const attackMonitor = `#!/bin/sh
out='@OUT@'; canary='@CANARY@'; w=$(pwd)
note() { echo "$*" >>"$out/notes"; }
try() {
	n=$1; shift
	if "$@" 2>/dev/null; then note "planted $n"; else note "denied $n"; fi
}
note "workdir $(stat -c %u:%a "$w")"
note "stdout $(readlink /proc/$$/fd/1)"
for f in launcher.log netsetup-state-eth0.json private/vif-cache-eth0.json bin/virt-launcher \
	share/container-disks/disk_0.img share/container-disks/kernel-boot/vmlinuz; do
	if [ -e "$w/$f" ] || [ -L "$w/$f" ]; then note "staged $f"; else note "missing $f"; fi
done
ls "$w"/resolv.conf.* >/dev/null 2>&1 && note "staged resolv.conf" || note "missing resolv.conf"
try launcher.log ln -sfn "$canary/secret" "$w/launcher.log"
try resolv.conf sh -c 'for f in "$1"/resolv.conf.*; do ln -sfn "$2/secret" "$f" || exit 1; done' - "$w" "$canary"
try netsetup-state ln -sfn "$canary/secret" "$w/netsetup-state-eth0.json"
try bin ln -sfn "$canary/secret" "$w/bin/virt-launcher"
try bin-dir mv "$w/bin" "$w/bin.old"
try private-dir mv "$w/private" "$w/private.old"
try new-entry ln -s "$canary" "$w/planted"
try vif-cache ln -sfn "$canary/secret" "$w/private/vif-cache-eth0.json"
try container-disk ln -sfn "$canary/secret" "$w/share/container-disks/disk_0.img"
try kernel-boot-dir sh -c 'mv "$1/kernel-boot" "$1/kb.old" && ln -s "$2" "$1/kernel-boot"' - "$w/share/container-disks" "$canary"
echo "attack monitor done"
exit 3
`

// TestRootLinksVlctlRun: every path root writes in a run's work dir is
// written before the launcher's user gets the tree, and the user can plant
// no link at any of them (the work dir stays root's); links it plants in
// its own directories are never followed by root's clean-up. One case per
// write root does.
func TestRootLinksVlctlRun(t *testing.T) {
	u := needLinkUser(t)
	c := newCanary(t)
	out := userDir(t, u)
	script := strings.NewReplacer("@OUT@", out, "@CANARY@", c.dir).Replace(attackMonitor)
	l := newLinkRun(t, u, script)
	status, err := l.run(t)
	if err == nil || !strings.Contains(err.Error(), "launcher exited before it was ready") {
		t.Fatalf("vlctl run: %v, want the fake launcher's failure\n%s", err, status)
	}
	if !strings.Contains(err.Error(), "attack monitor done") {
		t.Errorf("the monitor's output did not reach launcher.log: %v", err)
	}
	b, rerr := os.ReadFile(filepath.Join(out, "notes"))
	if rerr != nil {
		t.Fatalf("the monitor left no notes: %v", rerr)
	}
	notes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		notes[line] = true
	}
	t.Logf("launcher user's notes:\n%s", b)
	var workDir string
	for n := range notes {
		if p, ok := strings.CutPrefix(n, "stdout "); ok {
			workDir = filepath.Dir(p)
			if filepath.Base(p) != "launcher.log" || filepath.Dir(workDir) != l.workRoot {
				t.Errorf("the monitor's output is %s, want <work dir>/launcher.log", p)
			}
		}
	}
	if !notes["workdir 0:750"] {
		t.Error("the work dir was not root's, mode 0750, when the monitor started")
	}
	for _, c := range []struct {
		write  string // what root writes
		staged string // where, relative to the work dir
		want   string // what the launcher's user could do there
	}{
		{"launcher.log: the monitor's, launcher's and QEMU's output", "launcher.log", "denied launcher.log"},
		{"resolv.conf.<netns>: the pod's resolver config", "resolv.conf", "denied resolv.conf"},
		{"netsetup-state: the bridge binding's restore state", "netsetup-state-eth0.json", "denied netsetup-state"},
		{"binary copies", "bin/virt-launcher", "denied bin"},
		{"binary copies' directory", "bin/virt-launcher", "denied bin-dir"},
		{"pod dirs: none replaceable", "private/vif-cache-eth0.json", "denied private-dir"},
		{"work dir: nothing new in it", "launcher.log", "denied new-entry"},
		// In the user's own directories it may plant links: root wrote
		// there before the hand-over and only removes entries later.
		{"vif cache: removed at teardown, never followed", "private/vif-cache-eth0.json", "planted vif-cache"},
		{"containerDisk link", "share/container-disks/disk_0.img", "planted container-disk"},
		{"kernelBoot links", "share/container-disks/kernel-boot/vmlinuz", "planted kernel-boot-dir"},
	} {
		t.Run(strings.SplitN(c.write, ":", 2)[0], func(t *testing.T) {
			if !notes["staged "+c.staged] {
				t.Errorf("%s was not in place when the monitor started", c.staged)
			}
			if !notes[c.want] {
				t.Errorf("want %q in the launcher user's notes", c.want)
			}
		})
	}
	c.untouched(t)
	l.nothingLeft(t)
}

// swapper runs as the launcher's user for as long as it takes, swapping
// every directory it can in any work dir below root for a link to the
// canary, and notes each swap: "top" for the work dir's own entries (must
// never succeed), "inner" for those inside the user's pod directories.
const swapper = `#!/bin/sh
root='@ROOT@'; canary='@CANARY@'; out='@OUT@'
while [ ! -e "$out/stop" ]; do
	found=
	for w in "$root"/*/; do
		[ -d "$w" ] || continue
		found=1
		for d in share private ephemeral libvirt-run dev bin launcher.log; do
			if mv "$w$d" "$w$d.x" 2>/dev/null; then
				ln -s "$canary" "$w$d" 2>/dev/null
				echo "top $w$d" >>"$out/swaps"
			fi
		done
		for d in share/container-disks share/container-disks/kernel-boot share/sockets share/hotplug-disks; do
			if [ -d "$w$d" ] && [ ! -L "$w$d" ] && mv "$w$d" "$w$d.x" 2>/dev/null; then
				ln -s "$canary" "$w$d" 2>/dev/null
				echo "inner $w$d" >>"$out/swaps"
			fi
		done
	done
	[ -n "$found" ] || sleep 0.005
done
`

// waitMonitor is the monitor of TestRootLinksChownRace: it gives the
// swapper time to get at the tree (3 s, or until it did), then fails.
const waitMonitor = `#!/bin/sh
for i in $(seq 300); do
	grep -qs " $(pwd)/" '@OUT@/swaps' && break
	sleep 0.01
done
exit 3
`

// TestRootLinksChownRace: the chown race, bounded. A swapper replaces
// directories of every work dir with links to a root-owned directory,
// running as an id the way a guest that escaped into its QEMU would. The
// old recursive chown walked paths and could be steered to chown the
// link's target, and every VM ran as one user, so any escaped guest could
// race any run. Now each VM has an id of its own:
//   - an id some process still runs as is never given to a VM: three runs
//     that may only take the swapper's id are refused before anything is
//     made;
//   - a run next to it gets another id, and the swapper (another VM's id)
//     gets into none of its directories, during the hand-over or after.
func TestRootLinksChownRace(t *testing.T) {
	u := needLinkUser(t)
	c := newCanary(t)
	out := userDir(t, u)
	l := newLinkRun(t, u, strings.ReplaceAll(waitMonitor, "@OUT@", out))
	sw := filepath.Join(testenv.OpenDir(t), "swapper")
	if err := os.WriteFile(sw, []byte(strings.NewReplacer("@ROOT@", l.workRoot, "@CANARY@", c.dir, "@OUT@", out).Replace(swapper)), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nice", "-n", "10", sw)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		os.WriteFile(filepath.Join(out, "stop"), nil, 0o644)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	want := fmt.Sprintf("process %d runs with it", cmd.Process.Pid)
	for i := 0; i < 3; i++ {
		if status, err := l.run(t); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("run %d with the swapper's id alone: %v, want it refused (%q)\n%s", i, err, want, status)
		}
		l.nothingLeft(t)
	}
	l.uids = fmt.Sprintf("%d-%d", u.uid, u.uid+1)
	for i := 0; i < 3; i++ {
		if status, err := l.run(t); err == nil || !strings.Contains(err.Error(), "launcher exited before it was ready") {
			t.Fatalf("run %d next to the swapper: %v, want the fake launcher's failure\n%s", i, err, status)
		}
	}
	stop()
	b, _ := os.ReadFile(filepath.Join(out, "swaps"))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" {
			t.Errorf("another VM's id changed a run's work dir: %s", line)
		}
	}
	c.untouched(t)
	l.nothingLeft(t)
}

// TestRootLinksNetsetupFiles: the network's privileged phase (root) writes
// the vif cache and its restore state replacing links planted at their
// names (never writing through them), refuses a cache dir that is a link,
// and teardown refuses to read a restore state that became a link.
func TestRootLinksNetsetupFiles(t *testing.T) {
	u := needLinkUser(t)
	bridgeVMI := func() *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Name, v.Namespace = "links", "default"
		v.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
		v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default",
			InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}}}
		return v
	}
	newPod := func(t *testing.T) *podnet.Pod {
		p, err := podnet.New(podnet.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Remove() })
		return p
	}
	ctx := context.Background()

	t.Run("planted at the names", func(t *testing.T) {
		c := newCanary(t)
		pod := newPod(t)
		cache, state := t.TempDir(), t.TempDir()
		cfg := netsetup.PrivilegedConfig{QemuUID: u.uid, QemuGID: u.gid, CacheDir: cache, StateDir: state}
		vif, st := filepath.Join(cache, "vif-cache-eth0.json"), filepath.Join(state, "netsetup-state-eth0.json")
		for _, p := range []string{vif, st} {
			if err := os.Symlink(filepath.Join(c.dir, "secret"), p); err != nil {
				t.Fatal(err)
			}
		}
		if err := netsetup.SetupPrivileged(ctx, pod.NS, bridgeVMI(), cfg, nil); err != nil {
			t.Fatalf("setup: %v", err)
		}
		for _, p := range []string{vif, st} {
			if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s: %v, want the link replaced by a regular file", p, err)
			}
		}
		c.untouched(t)
		if err := netsetup.TeardownPrivileged(ctx, pod.NS, bridgeVMI(), cfg, nil); err != nil {
			t.Fatalf("teardown: %v", err)
		}
		for _, d := range []string{cache, state} {
			if ents, _ := os.ReadDir(d); len(ents) > 0 {
				t.Errorf("%s: %d entries left", d, len(ents))
			}
		}
		c.untouched(t)
	})

	t.Run("state a link at teardown", func(t *testing.T) {
		c := newCanary(t)
		pod := newPod(t)
		cfg := netsetup.PrivilegedConfig{QemuUID: u.uid, QemuGID: u.gid, CacheDir: t.TempDir(), StateDir: t.TempDir()}
		if err := netsetup.SetupPrivileged(ctx, pod.NS, bridgeVMI(), cfg, nil); err != nil {
			t.Fatalf("setup: %v", err)
		}
		st := filepath.Join(cfg.StateDir, "netsetup-state-eth0.json")
		if err := os.Remove(st); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(c.dir, "secret"), st); err != nil {
			t.Fatal(err)
		}
		err := netsetup.TeardownPrivileged(ctx, pod.NS, bridgeVMI(), cfg, nil)
		if !errors.Is(err, safefs.ErrSymlink) || !strings.Contains(err.Error(), st) {
			t.Errorf("teardown: %v, want a refused link naming %s", err, st)
		}
		c.untouched(t)
	})

	t.Run("cache dir a link", func(t *testing.T) {
		c := newCanary(t)
		pod := newPod(t)
		link := filepath.Join(t.TempDir(), "private")
		if err := os.Symlink(c.dir, link); err != nil {
			t.Fatal(err)
		}
		cfg := netsetup.PrivilegedConfig{QemuUID: u.uid, QemuGID: u.gid, CacheDir: link, StateDir: t.TempDir()}
		err := netsetup.SetupPrivileged(ctx, pod.NS, bridgeVMI(), cfg, nil)
		if !errors.Is(err, safefs.ErrSymlink) || !strings.Contains(err.Error(), link) {
			t.Errorf("setup: %v, want a refused link naming %s", err, link)
		}
		// Rolled back: no bridge or tap left in the pod namespace.
		plan.InNS(pod.NS, func() error {
			links, _ := netlink.LinkList()
			for _, l := range links {
				if n := l.Attrs().Name; strings.HasPrefix(n, "k6t-") || strings.HasPrefix(n, "tap") {
					t.Errorf("link %s left after the refused setup", n)
				}
			}
			return nil
		})
		if ents, _ := os.ReadDir(cfg.StateDir); len(ents) > 0 {
			t.Errorf("restore state left after the refused setup: %v", ents)
		}
		c.untouched(t)
	})
}

// TestRootLinksResolvConf: the pod's resolv.conf is not written through a
// link in place of its directory, and nothing is made there.
func TestRootLinksResolvConf(t *testing.T) {
	needLinkUser(t)
	c := newCanary(t)
	link := filepath.Join(t.TempDir(), "work")
	if err := os.Symlink(c.dir, link); err != nil {
		t.Fatal(err)
	}
	p, err := podnet.New(podnet.Config{Dir: link})
	if err == nil {
		p.Remove()
		t.Fatal("podnet wrote resolv.conf through a link")
	}
	if !errors.Is(err, safefs.ErrSymlink) || !strings.Contains(err.Error(), link) {
		t.Errorf("got %v, want a refused link naming %s", err, link)
	}
	c.untouched(t)
}
