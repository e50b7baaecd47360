//go:build imagetest

// Package imagetest runs the launcher image built by `make image` without a
// container engine: the image's layers are unpacked into a directory, which
// becomes the root (chroot) of a "pod" in its own mount, PID and network
// namespaces, with the pod's volumes bind-mounted at /run as KubeVirt's
// emptyDirs would be. The monitor is PID 1 there, started with the flags
// virt-controller's pod template passes, as root and as uid 107; a Sync over
// launcher-sock boots the repo's test guest, so the libvirt daemon, QEMU and
// firmware that run are the image's.
//
// Run with `make image-test` (the build tag keeps it out of `make test`: it
// needs the image archive, and fails, never skips, without it).
package imagetest

import (
	"archive/tar"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	vllayout "github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/ociimage"
	vlpod "github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/repo"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

const (
	archiveName = "bin/virtlauncher-launcher.oci.tar" // the Makefile's IMAGE
	qemuUID     = 107                                 // KubeVirt's non-root pods
	bootTimeout = 3 * time.Minute                     // TCG on a busy 2-core machine
	capNetBind  = 10                                  // CAP_NET_BIND_SERVICE
)

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	launchertest.Must(t, err)
	return root
}

func TestImageRootAndNonRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it makes namespaces, mounts and a chroot")
	}
	archive := filepath.Join(moduleRoot(t), archiveName)
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("%v: run `make image` first (make image-test does)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	guest, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("build test guest: %v", err)
	}
	for _, mode := range []struct {
		name string
		uid  int
	}{{"root", 0}, {"nonroot", qemuUID}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			runPod(t, archive, guest, mode.uid)
		})
	}
}

// pod is one pod: the unpacked image and its volumes, seen from the host.
type pod struct {
	t      *testing.T
	root   string          // the image's root filesystem
	vols   string          // bind-mounted at the pod's /run
	lay    vllayout.Layout // the pod's paths, as the host sees them
	uid    int
	cmd    *exec.Cmd
	out    testenv.SyncBuffer
	exited chan struct{}
	err    error
}

func runPod(t *testing.T, archive string, g *testguest.Guest, uid int) {
	dir, err := os.MkdirTemp("", "vlimg")
	launchertest.Must(t, err)
	t.Cleanup(func() {
		if os.Getenv("VL_KEEP") == "" {
			os.RemoveAll(dir)
		}
	})
	launchertest.Must(t, os.Chmod(dir, 0o755))
	p := &pod{t: t, root: filepath.Join(dir, "rootfs"), vols: filepath.Join(dir, "run"), uid: uid, exited: make(chan struct{})}
	t0 := time.Now()
	unpack(t, archive, p.root)
	t.Logf("unpacked the image in %v", time.Since(t0))
	p.checkImage()

	// The pod's paths inside are KubeVirt's (layout.Default, under
	// /var/run); outside they are under p.vols.
	p.lay = vllayout.Rooted(p.vols)
	// emptyDirs, writable by the pod's user (fsGroup 107 in non-root pods);
	// the container disk and kernel boot files root-owned and read-only,
	// as virt-handler's mounts of the container images are.
	for _, d := range []string{p.lay.ShareDir, p.lay.PrivateDir, p.lay.EphemeralDiskDir, p.lay.HotplugDiskDir, p.lay.LibvirtRunDir, filepath.Join(p.lay.ShareDir, "sockets")} {
		launchertest.Must(t, os.MkdirAll(d, 0o755))
		launchertest.Must(t, os.Chown(d, uid, uid))
	}
	launchertest.Must(t, os.Chmod(p.vols, 0o755))
	launchertest.Must(t, os.MkdirAll(p.lay.KernelBootDir(), 0o755))
	launchertest.Must(t, g.CopyRootDisk(p.lay.ContainerDiskImage(0)))
	launchertest.Must(t, os.Chmod(p.lay.ContainerDiskImage(0), 0o444))
	launchertest.Must(t, launchertest.CopyFile(g.Kernel, filepath.Join(p.lay.KernelBootDir(), "vmlinuz")))
	launchertest.Must(t, launchertest.CopyFile(g.Initrd, filepath.Join(p.lay.KernelBootDir(), "initrd.img")))

	name, ns, vmiUID := "img", "default", uuid.NewString()
	p.start(name, ns, vmiUID)
	ready := waitFor(t, p, 60*time.Second, func() bool {
		_, err := os.Stat(p.lay.ReadySocket())
		return err == nil
	}, "launcher-sock")
	t.Logf("monitor start -> launcher-sock: %v", ready)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cmdclient.Dial(ctx, p.lay.ReadySocket())
	if err != nil {
		t.Fatalf("dial launcher: %v\n%s", err, p.out.String())
	}
	defer c.Close()
	token := fmt.Sprintf("image-uid%d", uid)
	v, err := vmi.Load([]byte(launchertest.VMIYAML(launchertest.VMISpec{Name: name, Namespace: ns, UID: vmiUID, Token: token})), vmi.Options{})
	launchertest.Must(t, err)
	t1 := time.Now()
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync: %v\n%s", err, p.out.String())
	}
	booted := waitFor(t, p, bootTimeout, func() bool {
		_, ok := testguest.FindMarker(p.console(vmiUID), testguest.MarkerReady)
		return ok
	}, "the guest's "+testguest.MarkerReady)
	t.Logf("Sync -> guest ready: %v (waited %v for the marker)", time.Since(t1), booted)
	if out := p.console(vmiUID); !strings.Contains(out, "token "+token) {
		t.Errorf("the guest did not run its cloud-init user-data; console:\n%s", launchertest.Tail(out, 4000))
	}
	p.checkProcesses()
	p.checkNetworkTools()

	// SIGTERM to PID 1, as the kubelet stops the pod: the guest shuts
	// down and the monitor exits 0.
	mon := p.monitorPid()
	launchertest.Must(t, syscall.Kill(mon, syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the pod did not end 2 min after SIGTERM:\n%s", launchertest.Tail(p.out.String(), 8000))
	}
	if p.err != nil {
		t.Fatalf("the pod ended with %v:\n%s", p.err, launchertest.Tail(p.out.String(), 8000))
	}
}

// start runs the monitor as the pod's PID 1 with virt-controller's flags
// (pkg/virt-controller/services/template.go), defaults for the paths.
// --force-emulation is ours: guests here run under TCG only.
func (p *pod) start(name, ns, vmiUID string) {
	argv := []string{"/usr/bin/virt-launcher-monitor",
		"--qemu-timeout", "240s", "--name", name, "--uid", vmiUID, "--namespace", ns,
		"--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
		"--container-disk-dir", "/var/run/kubevirt/container-disks", "--grace-period-seconds", "45",
		"--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
		"--hypervisor", "kvm"}
	if p.uid != 0 {
		argv = append(argv, "--run-as-nonroot")
	}
	argv = append(argv, "--allow-emulation", "--force-emulation")
	// A pod's environment: kubelet's service variables, no host leftovers.
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME=virt-launcher-img", "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443"}
	if p.uid != 0 {
		env = append(env, "HOME=/home/qemu")
	} else {
		env = append(env, "HOME=/root")
	}
	// A network namespace of its own, as a pod has.
	cmd, err := vlpod.ImagePod{Root: p.root, Run: p.vols, UID: p.uid, GID: p.uid, Argv: argv, Env: env, Net: true}.Command(context.Background())
	launchertest.Must(p.t, err)
	p.cmd = cmd
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	launchertest.Must(p.t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	p.t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			// Killing the namespace's PID 1 kills everything in it.
			if pid := p.monitorPid(); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		if p.t.Failed() || os.Getenv("VL_KEEP") != "" {
			p.t.Logf("pod output:\n%s", launchertest.Tail(p.out.String(), 20000))
		}
	})
}

// monitorPid is the host pid of the pod's PID 1 (unshare's child).
func (p *pod) monitorPid() int {
	for _, d := range launchertest.DescendantsOf(p.cmd.Process.Pid) {
		if d.PPID == p.cmd.Process.Pid {
			return d.PID
		}
	}
	return 0
}

func (p *pod) console(vmiUID string) string {
	b, _ := os.ReadFile(p.lay.SerialLog(vmiUID))
	return string(b)
}

// checkImage checks what KubeVirt's pod contract needs of the image's
// files, as unpacked by a runtime.
func (p *pod) checkImage() {
	t := p.t
	if l, err := os.Readlink(filepath.Join(p.root, "var/run")); err != nil || l != "../run" {
		t.Errorf("/var/run -> %q (%v), want the relative ../run", l, err)
	}
	for _, b := range []string{"virt-launcher", "virt-launcher-monitor", "container-disk", "virt-tail", "virt-probe", "virt-freezer", "libvirt-hook-client", "node-labeller.sh", "qemu-system-x86_64", "qemu-img", "swtpm", "virsh", "cp"} {
		if st, err := os.Stat(filepath.Join(p.root, "usr/bin", b)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("/usr/bin/%s: not an executable in the image (%v)", b, err)
		}
	}
	// libvirt's qemu hook, the pre-migration hook server's client.
	if st, err := os.Stat(filepath.Join(p.root, "etc/libvirt/hooks/qemu")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("/etc/libvirt/hooks/qemu: not an executable in the image (%v)", err)
	}
	// virtiofs: the wrapper virt-controller's virtiofs containers run,
	// and the QEMU 7.2 daemon it runs.
	for _, f := range []string{"usr/libexec/virtiofsd", "usr/lib/qemu/virtiofsd"} {
		if st, err := os.Stat(filepath.Join(p.root, f)); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("/%s: not an executable in the image (%v)", f, err)
		}
	}
	// iproute2's /usr/sbin/ip is an absolute link to /bin/ip, which only
	// the pod's root resolves: checkNetworkTools runs it there.
	for _, f := range []string{"usr/sbin/libvirtd", "usr/bin/ip", "usr/sbin/bridge", "usr/bin/swtpm_setup", "usr/share/OVMF/OVMF_CODE_4M.fd", "usr/share/edk2/ovmf/OVMF_VARS.secboot.fd", "bin/bash", "bin/sh"} {
		if _, err := os.Stat(filepath.Join(p.root, f)); err != nil {
			t.Errorf("/%s missing: %v", f, err)
		}
	}
	passwd, err := os.ReadFile(filepath.Join(p.root, "etc/passwd"))
	launchertest.Must(t, err)
	for _, want := range []string{"\nqemu:x:107:107:", "\nlibvirt-qemu:x:64055:"} {
		if !strings.Contains("\n"+string(passwd), want) {
			t.Errorf("/etc/passwd lacks %q:\n%s", want, passwd)
		}
	}
	group, err := os.ReadFile(filepath.Join(p.root, "etc/group"))
	launchertest.Must(t, err)
	for _, want := range []string{"\nqemu:x:107:", "\nkvm:x:", "\nlibvirt-qemu:x:64055:"} {
		if !strings.Contains("\n"+string(group), want) {
			t.Errorf("/etc/group lacks %q", want)
		}
	}
	// Trimmed on purpose: no documentation beyond the licences, no
	// translations, no apt caches (the image has no apt).
	for dir, keep := range map[string]string{"usr/share/man": "", "usr/share/doc": "copyright", "usr/share/locale": "locale.alias", "usr/share/perl": "", "var/cache/apt": ""} {
		var extra []string
		filepath.WalkDir(filepath.Join(p.root, dir), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && filepath.Base(path) != keep {
				extra = append(extra, path)
			}
			return nil
		})
		if len(extra) > 0 {
			t.Errorf("/%s has %d files (trimmed on purpose), e.g. %s", dir, len(extra), extra[0])
		}
	}
	// One QEMU only: libvirt probes each qemu-system-* binary on the first
	// capabilities request, which the first GetDomainStats makes.
	if _, err := os.Lstat(filepath.Join(p.root, "usr/bin/qemu-system-i386")); err == nil {
		t.Errorf("/usr/bin/qemu-system-i386 is in the image (libvirt would probe it)")
	}
	if _, err := os.Lstat(filepath.Join(p.root, "etc/resolv.conf")); err == nil {
		t.Errorf("/etc/resolv.conf is in the image (the kubelet provides it)")
	}
}

// checkProcesses checks that the daemon and QEMU run from the image's
// root, as the pod's user, and (non-root) that the launcher holds
// CAP_NET_BIND_SERVICE from the monitor's file capability.
func (p *pod) checkProcesses() {
	t := p.t
	want := map[string]bool{"libvirtd": false, "qemu-system-x86": false, "virt-launcher": false}
	for _, d := range launchertest.DescendantsOf(p.cmd.Process.Pid) {
		if _, ok := want[d.Comm]; !ok {
			continue
		}
		want[d.Comm] = true
		if r, err := os.Readlink(fmt.Sprintf("/proc/%d/root", d.PID)); err != nil || r != p.root {
			t.Errorf("%s runs with root %q (%v), want the image's %s", d, r, err, p.root)
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.PID))
		if err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		if u := statusField(string(st), "Uid"); u != strconv.Itoa(p.uid) {
			t.Errorf("%s runs as uid %s, want %d", d, u, p.uid)
		}
		if d.Comm == "virt-launcher" && p.uid != 0 {
			amb, err := strconv.ParseUint(statusField(string(st), "CapAmb"), 16, 64)
			if err != nil || amb&(1<<capNetBind) == 0 {
				t.Errorf("virt-launcher's ambient capabilities %q: no CAP_NET_BIND_SERVICE (the monitor's file capability did not arrive)", statusField(string(st), "CapAmb"))
			}
		}
	}
	for c, seen := range want {
		if !seen {
			t.Errorf("no %s process in the pod", c)
		}
	}
}

// checkNetworkTools runs, as kubectl exec would in the compute container
// (the pod's root, mount and network namespaces, its user), what KubeVirt's
// suite runs there: its network specs' `/usr/sbin/ip link show` and its
// failure reporter's ip and bridge commands.
func (p *pod) checkNetworkTools() {
	t := p.t
	mon := p.monitorPid()
	if mon == 0 {
		t.Fatal("no monitor process to exec beside")
	}
	for _, argv := range [][]string{
		{"/usr/sbin/ip", "-o", "link", "show"},
		{"/usr/sbin/ip", "address"},
		{"/usr/sbin/ip", "route", "show", "table", "all"},
		{"/usr/sbin/bridge", "-j", "vlan", "show"},
		{"/usr/sbin/bridge", "fdb"},
	} {
		uid := strconv.Itoa(p.uid)
		args := append([]string{"--target", strconv.Itoa(mon), "--mount", "--net", "--root", "--setuid", uid, "--setgid", uid, "--"}, argv...)
		cmd := exec.Command("nsenter", args...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s in the pod as uid %d: %v\n%s", strings.Join(argv, " "), p.uid, err, out)
			continue
		}
		if argv[1] == "-o" && !strings.Contains(string(out), " lo: ") {
			t.Errorf("ip link show in the pod lists no lo:\n%s", out)
		}
	}
}

// statusField is the first word of a /proc/pid/status field.
func statusField(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// waitFor polls cond until timeout, failing the test (with the pod's
// output) if the pod ends first or the time runs out.
func waitFor(t *testing.T, p *pod, timeout time.Duration, cond func() bool, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		select {
		case <-p.exited:
			t.Fatalf("the pod ended (%v) before %s:\n%s", p.err, what, launchertest.Tail(p.out.String(), 8000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > timeout {
			t.Fatalf("no %s after %v:\n%s", what, timeout, launchertest.Tail(p.out.String(), 8000))
		}
	}
	return time.Since(start)
}

// unpack extracts the archive's image (the flattened layers, as a runtime
// would apply them) into dir, keeping owners, modes, links and extended
// attributes.
func unpack(t *testing.T, archive, dir string) {
	t.Helper()
	lay := filepath.Join(filepath.Dir(dir), "oci")
	img, err := ociimage.ReadArchive(archive, lay)
	launchertest.Must(t, err)
	cf, err := img.ConfigFile()
	launchertest.Must(t, err)
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/bin/virt-launcher" || cf.Config.User != "" {
		t.Errorf("image config: entrypoint %q user %q, want KubeVirt's /usr/bin/virt-launcher and no user (root)", got, cf.Config.User)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	launchertest.Must(t, os.MkdirAll(dir, 0o755))
	launchertest.Must(t, extract(rc, dir))
	launchertest.Must(t, os.RemoveAll(lay))
}

// extract writes a tar stream under dir as root would unpack a layer. Names
// are checked not to leave dir; symlinks are never followed (every path is
// created with its parent checked to be a real directory).
func extract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	var dirs []*tar.Header
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := realDirs(dir, filepath.Dir(rel)); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !os.IsExist(err) {
				return err
			}
			dirs = append(dirs, h)
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), p); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: tar type %q not expected in the image", h.Name, h.Typeflag)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeSymlink && h.Typeflag != tar.TypeDir {
			if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
				return err
			}
		}
		for k, v := range h.PAXRecords {
			if a, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if err := unix.Lsetxattr(p, a, []byte(v), 0); err != nil {
					return fmt.Errorf("%s: set %s: %w", h.Name, a, err)
				}
			}
		}
	}
	// Directory modes last: a read-only directory must be filled first.
	for i := len(dirs) - 1; i >= 0; i-- {
		h := dirs[i]
		if err := os.Chmod(filepath.Join(dir, filepath.Clean("/"+h.Name)), os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// modeBits maps setuid, setgid and sticky from tar's mode to Go's.
func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// realDirs checks that every element of rel under dir is a directory, not
// a symlink, so that writing below it stays inside dir.
func realDirs(dir, rel string) error {
	p := dir
	for _, e := range strings.Split(strings.Trim(rel, "/"), "/") {
		if e == "" {
			continue
		}
		p = filepath.Join(p, e)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", p)
		}
	}
	return nil
}

// TestNodeLabeller runs the image's node-labeller.sh as virt-handler's
// init container does (root, PREFERRED_VIRTTYPE and HYPERVISOR_DEVICE kvm)
// and checks the three files with what virt-handler needs of them: it
// does not start without them (cmd/virt-handler, node-labeller).
func TestNodeLabeller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it makes namespaces, mounts and a chroot")
	}
	archive := filepath.Join(moduleRoot(t), archiveName)
	if _, err := os.Stat(archive); err != nil {
		t.Fatalf("%v: run `make image` first (make image-test does)", err)
	}
	dir := t.TempDir()
	launchertest.Must(t, os.Chmod(dir, 0o755))
	root, vols := filepath.Join(dir, "rootfs"), filepath.Join(dir, "run")
	unpack(t, archive, root)
	launchertest.Must(t, os.MkdirAll(filepath.Join(vols, "labeller"), 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, err := vlpod.ImagePod{Root: root, Run: vols, Argv: []string{"/bin/sh", "-c", "node-labeller.sh"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
			"PREFERRED_VIRTTYPE=kvm", "HYPERVISOR_DEVICE=kvm", "NODE_LABELLER_DIR=/run/labeller"}}.Command(ctx)
	launchertest.Must(t, err)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node-labeller.sh: %v\n%s", err, out)
	}
	t.Logf("node-labeller.sh:\n%s", launchertest.Tail(string(out), 2000))
	read := func(name string, v any) {
		data, err := os.ReadFile(filepath.Join(vols, "labeller", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var caps libvirtxml.Caps
	read("capabilities.xml", &caps)
	if caps.Host.CPU == nil || caps.Host.CPU.Arch != "x86_64" {
		t.Errorf("capabilities.xml: no x86_64 host CPU (virt-handler reads its counter)")
	}
	machines := 0
	for _, g := range caps.Guests {
		machines += len(g.Arch.Machines)
	}
	if machines == 0 {
		t.Errorf("capabilities.xml: no guest machine types")
	}
	var dc libvirtxml.DomainCaps
	read("virsh_domcapabilities.xml", &dc)
	if dc.Machine == "" || !strings.HasPrefix(dc.Machine, "pc-q35") || dc.CPU == nil || len(dc.CPU.Modes) == 0 {
		t.Fatalf("virsh_domcapabilities.xml: machine %q, CPU %+v", dc.Machine, dc.CPU)
	}
	for _, m := range dc.CPU.Modes {
		// virt-handler refuses a supported host-model without a model.
		if m.Name == "host-model" && m.Supported == "yes" && len(m.Models) == 0 {
			t.Errorf("virsh_domcapabilities.xml: host-model supported but no model")
		}
	}
	var features libvirtxml.DomainCPU
	read("supported_features.xml", &features)
	if len(features.Features) == 0 {
		t.Errorf("supported_features.xml: no CPU features")
	}
}
