// Package reliability tries the real launcher with bad input, faults,
// concurrent clients and hostile surroundings: the real monitor and
// launcher run as the unprivileged user virtlauncher with their own libvirt
// daemon and QEMU (TCG) booting the test guest, driven over the real gRPC
// command socket. See README.md for what is covered and the soak variants.
package reliability

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

var soakFlag = flag.Bool("soak", false, "run the long soak variants (also VL_SOAK=1)")

// soak reports whether the long variants run.
func soak() bool { return *soakFlag || os.Getenv("VL_SOAK") == "1" }

var (
	binDir  string // virt-launcher, virt-launcher-monitor, vlctl
	capsDir string // shared --qemu-caps-cache
	guest   *testguest.Guest
	cred    *syscall.Credential
	setup   error // why the launcher tests cannot run, if they cannot
)

const bootTimeout = 120 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "vl-rel-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	setup = prepare(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func prepare(dir string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/virt-launcher", "./cmd/virt-launcher-monitor", "./cmd/vlctl")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build binaries: %v\n%s", err, out)
	}
	binDir = dir
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root to start the launcher as user virtlauncher")
	}
	u, err := user.Lookup("virtlauncher")
	if err != nil {
		return fmt.Errorf("user virtlauncher missing (run scripts/install-deps): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	capsDir = filepath.Join(dir, "qemu-caps")
	if err := os.Mkdir(capsDir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(capsDir, uid, gid); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		return fmt.Errorf("build test guest: %w", err)
	}
	guest = g
	return nil
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no go.mod above %s", wd)
}

func need(t *testing.T) {
	t.Helper()
	if setup != nil {
		t.Skip(setup)
	}
}

// pod is one launcher "pod": a directory laid out like KubeVirt's pod
// volumes and the monitor + launcher running in it.
type pod struct {
	t      *testing.T
	dir    string
	layout layout.Layout
	name   string
	ns     string
	uid    string

	cmd     *exec.Cmd
	out     *syncBuffer
	exited  chan struct{}
	exitErr error

	mu   sync.Mutex
	seen map[int]proc // every descendant of the monitor ever observed
}

type podOpts struct {
	grace int
	// ephemeralTmpfs mounts a tmpfs of this size (e.g. "128k") as the
	// ephemeral disk directory.
	ephemeralTmpfs string
}

func newPod(t *testing.T, name string, o podOpts) *pod {
	t.Helper()
	need(t)
	dir, err := os.MkdirTemp("", "vlr") // short: socket paths <= 107 bytes
	must(t, err)
	p := &pod{t: t, dir: dir, layout: layout.Under(dir), name: name, ns: "default", uid: uuid.NewString(),
		out: &syncBuffer{}, exited: make(chan struct{}), seen: map[int]proc{}}
	t.Cleanup(p.cleanup)
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	must(t, os.MkdirAll(p.layout.KernelBootDir(), 0o755))
	must(t, guest.CopyRootDisk(p.layout.ContainerDiskImage(0)))
	must(t, os.Chmod(p.layout.ContainerDiskImage(0), 0o444))
	must(t, copyFile(guest.Kernel, filepath.Join(p.layout.KernelBootDir(), "vmlinuz")))
	must(t, copyFile(guest.Initrd, filepath.Join(p.layout.KernelBootDir(), "initrd.img")))
	must(t, os.Chown(p.layout.ShareDir, int(cred.Uid), int(cred.Gid)))
	if o.ephemeralTmpfs != "" {
		must(t, os.MkdirAll(p.layout.EphemeralDiskDir, 0o755))
		opts := fmt.Sprintf("size=%s,mode=0755,uid=%d,gid=%d", o.ephemeralTmpfs, cred.Uid, cred.Gid)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "vlrel", p.layout.EphemeralDiskDir).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs: %v %s", err, out)
		}
	}
	if o.grace == 0 {
		o.grace = 30
	}
	args := []string{
		"--qemu-timeout", "5m",
		"--name", p.name, "--namespace", p.ns, "--uid", p.uid,
		"--kubevirt-share-dir", p.layout.ShareDir,
		"--ephemeral-disk-dir", p.layout.EphemeralDiskDir,
		"--container-disk-dir", p.layout.ContainerDiskDir,
		"--hotplug-disk-dir", p.layout.HotplugDiskDir,
		"--private-dir", p.layout.PrivateDir,
		"--libvirt-run-dir", p.layout.LibvirtRunDir,
		"--grace-period-seconds", strconv.Itoa(o.grace),
		"--allow-emulation", "--force-emulation", "--run-as-nonroot",
		"--qemu-caps-cache", capsDir,
	}
	p.cmd = exec.Command(filepath.Join(binDir, "virt-launcher-monitor"), args...)
	p.cmd.Dir = dir
	p.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "VIRT_LAUNCHER_BIN=" + filepath.Join(binDir, "virt-launcher")}
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	must(t, p.cmd.Start())
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	// Record the tree as it grows, so that "nothing left" also covers
	// processes re-parented away from the monitor.
	go func() {
		for {
			select {
			case <-p.exited:
				return
			case <-time.After(200 * time.Millisecond):
				p.descendants()
			}
		}
	}()
	return p
}

func (p *pod) waitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p.layout.ReadySocket()); err == nil {
			return
		}
		select {
		case <-p.exited:
			p.t.Fatalf("launcher exited before it was ready (%v):\n%s", p.exitErr, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("no %s after %v:\n%s", p.layout.ReadySocket(), timeout, p.out.String())
}

func (p *pod) client(ctx context.Context) *cmdclient.Client {
	p.t.Helper()
	c, err := cmdclient.Dial(ctx, p.layout.ReadySocket())
	if err != nil {
		p.t.Fatalf("dial launcher: %v", err)
	}
	p.t.Cleanup(func() { c.Close() })
	return c
}

// exitCode waits for the monitor to exit and returns its status.
func (p *pod) exitCode(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("monitor still running after %v:\n%s", timeout, p.out.String())
	}
	if p.exitErr == nil {
		return 0
	}
	if ee, ok := p.exitErr.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.t.Fatalf("wait: %v", p.exitErr)
	return -1
}

func (p *pod) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *pod) signal(sig syscall.Signal) {
	p.t.Helper()
	must(p.t, p.cmd.Process.Signal(sig))
}

func (p *pod) cleanup() {
	if p.running() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		for _, d := range p.descendants() {
			syscall.Kill(d.pid, syscall.SIGKILL)
		}
		<-p.exited
	}
	for _, pid := range processesUnder(p.dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if p.t.Failed() || os.Getenv("VL_KEEP") != "" {
		n := 8000
		if os.Getenv("VL_FULLLOG") != "" {
			n = 1 << 30
		}
		p.t.Logf("monitor/launcher output:\n%s", tail(p.out.String(), n))
	}
	exec.Command("umount", "-l", p.layout.EphemeralDiskDir).Run() // only ours; harmless when not mounted
	if os.Getenv("VL_KEEP") == "" {
		os.RemoveAll(p.dir)
	}
}

func (p *pod) domainName() string { return p.ns + "_" + p.name }

func (p *pod) qemuPid() int {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.layout.LibvirtRunDir, "libvirt", "qemu", "run", p.domainName()+".pid"))
	must(p.t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(p.t, err)
	return pid
}

func (p *pod) console() string {
	b, _ := os.ReadFile(p.layout.SerialLog(p.uid))
	return string(b)
}

func (p *pod) waitConsole(marker string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := p.console()
		if rest, ok := testguest.FindMarker(out, marker); ok {
			return rest
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %s on the console after %v; console:\n%s\nlauncher:\n%s", marker, timeout, tail(out, 4000), tail(p.out.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// descendants lists the live processes under the monitor (by ppid chain)
// and remembers them.
func (p *pod) descendants() []proc {
	if p.cmd.Process == nil {
		return nil
	}
	ds := descendantsOf(p.cmd.Process.Pid)
	p.mu.Lock()
	for _, d := range ds {
		p.seen[d.pid] = d
	}
	p.mu.Unlock()
	return ds
}

// child returns the first live descendant named one of names (0 if none).
func (p *pod) child(names ...string) int {
	for _, d := range p.descendants() {
		for _, n := range names {
			if d.comm == n {
				return d.pid
			}
		}
	}
	return 0
}

func (p *pod) mustChild(names ...string) int {
	p.t.Helper()
	if pid := p.child(names...); pid != 0 {
		return pid
	}
	p.t.Fatalf("no descendant %v of the monitor; tree: %v", names, p.descendants())
	return 0
}

// assertNothingLeft: no process of the pod survives (neither one ever seen
// under the monitor nor one whose command line names the pod directory),
// and no socket is left in the pod directory.
func (p *pod) assertNothingLeft() {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		p.mu.Lock()
		for pid, d := range p.seen {
			if q, ok := readProc(pid); ok && q.state != "Z" && q.start == d.start {
				left = append(left, fmt.Sprintf("%d(%s)", pid, d.comm))
			}
		}
		p.mu.Unlock()
		for _, pid := range processesUnder(p.dir) {
			left = append(left, fmt.Sprintf("%d(cmdline names the pod dir)", pid))
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if socks := socketsUnder(p.dir); len(socks) > 0 {
		p.t.Errorf("sockets left behind: %v", socks)
	}
}

func socketsUnder(dir string) []string {
	var out []string
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSocket != 0 {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// proc is one /proc entry.
type proc struct {
	pid, ppid int
	comm      string
	state     string
	start     string // start time in clock ticks: tells pid reuse apart
}

func (q proc) String() string { return fmt.Sprintf("%d(%s)", q.pid, q.comm) }

func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	open, cl := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || cl < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[cl+1:])
	if len(f) < 20 {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return proc{pid: pid, ppid: ppid, comm: s[open+1 : cl], state: f[0], start: f[19]}, true
}

func allProcs() []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if q, ok := readProc(pid); ok {
			out = append(out, q)
		}
	}
	return out
}

// descendantsOf follows ppid chains from root; zombies are left out.
func descendantsOf(root int) []proc {
	children := map[int][]proc{}
	for _, q := range allProcs() {
		children[q.ppid] = append(children[q.ppid], q)
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if c.state != "Z" {
				out = append(out, c)
			}
			queue = append(queue, c.pid)
		}
	}
	return out
}

func alive(pid int) bool {
	q, ok := readProc(pid)
	return ok && q.state != "Z"
}

// processesUnder lists live processes whose command line names a path
// inside dir (dir + "/": /tmp/vlr12 must not match /tmp/vlr123/...).
func processesUnder(dir string) []int {
	var pids []int
	for _, q := range allProcs() {
		if q.pid == os.Getpid() || q.state == "Z" {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", q.pid))
		if err == nil && bytes.Contains(cmdline, []byte(dir+"/")) {
			pids = append(pids, q.pid)
		}
	}
	return pids
}

// vmiYAML is the test VMI: the test guest from a containerDisk with
// kernelBoot, an emptyDisk and a cloud-init NoCloud volume.
func vmiYAML(name, ns, uid string, kernelArgs ...string) string {
	args := append([]string{testguest.DefaultCmdline, testguest.OptNoDHCP}, kernelArgs...)
	return fmt.Sprintf(`apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: %s
  namespace: %s
  uid: %s
spec:
  terminationGracePeriodSeconds: 30
  domain:
    firmware:
      kernelBoot:
        container:
          image: registry.example/testguest-kernel:v1
          kernelPath: /vmlinuz
          initrdPath: /initrd.img
        kernelArgs: %q
    devices:
      autoattachPodInterface: false
      disks:
      - name: root
        disk: {bus: virtio}
      - name: scratch
        disk: {bus: virtio}
      - name: cloudinit
        disk: {bus: virtio}
    resources:
      requests:
        memory: 128Mi
  volumes:
  - name: root
    containerDisk:
      image: registry.example/testguest-root:v1
  - name: scratch
    emptyDisk:
      capacity: 64Mi
  - name: cloudinit
    cloudInitNoCloud:
      userData: |
        #!/bin/sh
        echo "token %s"
`, name, ns, uid, strings.Join(args, " "), name)
}

func (p *pod) vmiYAML(kernelArgs ...string) string {
	return vmiYAML(p.name, p.ns, p.uid, kernelArgs...)
}

func (p *pod) vmi(kernelArgs ...string) *v1.VirtualMachineInstance {
	p.t.Helper()
	v, err := vmi.Load([]byte(p.vmiYAML(kernelArgs...)), vmi.Options{})
	if err != nil {
		p.t.Fatalf("load test VMI: %v", err)
	}
	return v
}

// boot syncs the test VMI and waits for the guest's shell.
func (p *pod) boot(ctx context.Context, c *cmdclient.Client, kernelArgs ...string) {
	p.t.Helper()
	if err := c.Sync(ctx, p.vmi(kernelArgs...), nil); err != nil {
		p.t.Fatalf("Sync: %v\n%s", err, tail(p.out.String(), 4000))
	}
	p.waitConsole(testguest.MarkerReady, bootTimeout)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
