// Package integration runs the real virt-launcher (through
// virt-launcher-monitor) as the unprivileged user virtlauncher, with its
// own libvirt daemon and QEMU, booting the test guest, and drives it over
// the real gRPC command socket as virt-handler would.
package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

var (
	binDir  string           // virt-launcher and virt-launcher-monitor
	capsDir string           // --qemu-caps-cache shared by the pods that opt in
	guest   *testguest.Guest // the test guest, built once
	cred    *syscall.Credential
	setup   error // why the tests cannot run, if they cannot
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "vl-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	setup = prepare(dir)
	return m.Run()
}

func prepare(dir string) error {
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
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/virt-launcher", "./cmd/virt-launcher-monitor")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build launcher: %v\n%s", err, out)
	}
	binDir = dir
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

// pod is one launcher "pod": a working directory laid out like KubeVirt's
// pod volumes, and the monitor + launcher running in it.
type pod struct {
	t      *testing.T
	dir    string
	layout layout.Layout
	name   string
	ns     string
	uid    string

	cmd     *exec.Cmd
	stderr  *syncBuffer
	exited  chan struct{}
	exitErr error
	started time.Time
	ready   time.Duration

	// extraUserData lines are appended to the user-data script.
	extraUserData []string
}

type podOpts struct {
	qemuTimeout time.Duration
	grace       int
	sharedCaps  bool // pass --qemu-caps-cache (the first pod still probes)
}

// newPod makes the directories, places the test guest's root disk at the
// container-disk path and its kernel in kernel-boot/, and starts the
// monitor as user virtlauncher.
func newPod(t *testing.T, name string, o podOpts) *pod {
	t.Helper()
	p := newPodDeferred(t, name, o)
	p.start()
	return p
}

// newPodDeferred prepares the pod; start runs it.
func newPodDeferred(t *testing.T, name string, o podOpts) *pod {
	t.Helper()
	need(t)
	// Short: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "vl")
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{t: t, dir: dir, layout: layout.Under(dir), name: name, ns: "default", uid: uuid.NewString(),
		stderr: &syncBuffer{}, exited: make(chan struct{})}
	t.Cleanup(p.cleanup)
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	// The container-disk volume is filled by virt-handler in a pod; here
	// the test plays that part. The image stays root-owned and read-only
	// for the launcher, as a bind-mounted container image would be.
	must(t, os.MkdirAll(p.layout.KernelBootDir(), 0o755))
	must(t, guest.CopyRootDisk(p.layout.ContainerDiskImage(0)))
	must(t, os.Chmod(p.layout.ContainerDiskImage(0), 0o444))
	must(t, copyFile(guest.Kernel, filepath.Join(p.layout.KernelBootDir(), "vmlinuz")))
	must(t, copyFile(guest.Initrd, filepath.Join(p.layout.KernelBootDir(), "initrd.img")))
	must(t, os.Chown(p.layout.ShareDir, int(cred.Uid), int(cred.Gid)))

	if o.qemuTimeout == 0 {
		o.qemuTimeout = 3 * time.Minute
	}
	if o.grace == 0 {
		o.grace = 30
	}
	args := []string{
		"--qemu-timeout", o.qemuTimeout.String(),
		"--name", p.name, "--namespace", p.ns, "--uid", p.uid,
		"--kubevirt-share-dir", p.layout.ShareDir,
		"--ephemeral-disk-dir", p.layout.EphemeralDiskDir,
		"--container-disk-dir", p.layout.ContainerDiskDir,
		"--hotplug-disk-dir", p.layout.HotplugDiskDir,
		"--private-dir", p.layout.PrivateDir,
		"--libvirt-run-dir", p.layout.LibvirtRunDir,
		"--grace-period-seconds", strconv.Itoa(o.grace),
		"--allow-emulation", "--force-emulation", "--run-as-nonroot",
	}
	if o.sharedCaps {
		args = append(args, "--qemu-caps-cache", capsDir)
	}
	p.cmd = exec.Command(filepath.Join(binDir, "virt-launcher-monitor"), args...)
	p.cmd.Dir = dir
	p.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "VIRT_LAUNCHER_BIN=" + filepath.Join(binDir, "virt-launcher")}
	p.cmd.Stdout = p.stderr
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	return p
}

func (p *pod) start() {
	p.t.Helper()
	p.started = time.Now()
	must(p.t, p.cmd.Start())
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
}

func (p *pod) env(k, v string) { p.cmd.Env = append(p.cmd.Env, k+"="+v) }

// waitReady waits for the launcher-sock rename.
func (p *pod) waitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p.layout.ReadySocket()); err == nil {
			p.ready = time.Since(p.started)
			return
		}
		select {
		case <-p.exited:
			p.t.Fatalf("launcher exited before it was ready (%v):\n%s", p.exitErr, p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("no %s after %v:\n%s", p.layout.ReadySocket(), timeout, p.stderr.String())
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
		p.t.Fatalf("monitor still running after %v:\n%s", timeout, p.stderr.String())
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

func (p *pod) signal(sig syscall.Signal) {
	p.t.Helper()
	must(p.t, p.cmd.Process.Signal(sig))
}

// cleanup kills whatever is left (it should be nothing) and removes the
// directory.
func (p *pod) cleanup() {
	if p.cmd.Process == nil {
		os.RemoveAll(p.dir)
		return
	}
	select {
	case <-p.exited:
	default:
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	for _, pid := range processesUnder(p.dir) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if p.t.Failed() || os.Getenv("VL_KEEP") != "" {
		p.t.Logf("launcher output:\n%s", p.stderr.String())
	}
	if os.Getenv("VL_KEEP") == "" {
		os.RemoveAll(p.dir)
	}
}

func (p *pod) domainName() string { return p.ns + "_" + p.name }

// qemuPid reads the pid libvirt recorded for the domain.
func (p *pod) qemuPid() int {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.layout.LibvirtRunDir, "libvirt", "qemu", "run", p.domainName()+".pid"))
	if err != nil {
		p.t.Fatalf("QEMU pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		p.t.Fatal(err)
	}
	return pid
}

// console is the serial console log (virtlogd writes it from the first
// byte, so nothing is missed between start and connect).
func (p *pod) console() string {
	b, _ := os.ReadFile(p.layout.SerialLog(p.uid))
	return string(b)
}

// waitConsole waits until the console shows marker.
func (p *pod) waitConsole(marker string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := p.console()
		if rest, ok := testguest.FindMarker(out, marker); ok {
			return rest
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %s on the console after %v; console:\n%s\nlauncher:\n%s", marker, timeout, out, p.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesUnder lists live processes whose command line mentions dir
// (daemons, QEMU, launcher, monitor of one pod).
func processesUnder(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// assertNothingLeft checks that no process of the pod survives.
func (p *pod) assertNothingLeft() {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesUnder(p.dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, pid := range left {
				c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				desc = append(desc, fmt.Sprintf("%d(%s)", pid, strings.TrimSpace(string(c))))
			}
			p.t.Fatalf("processes left behind: %v", desc)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testVMI is a VMI booting the test guest from a containerDisk with
// kernelBoot, plus an emptyDisk and a cloud-init NoCloud volume whose
// user-data script prints token.
func (p *pod) testVMI(t *testing.T, token string, kernelArgs ...string) *v1.VirtualMachineInstance {
	t.Helper()
	v, err := vmi.Load([]byte(p.testVMIYAML(token, kernelArgs...)), vmi.Options{})
	if err != nil {
		t.Fatalf("load test VMI: %v", err)
	}
	return v
}

func (p *pod) testVMIYAML(token string, kernelArgs ...string) string {
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
`, p.name, p.ns, p.uid, strings.Join(args, " "), token) + p.extraLines()
}

func (p *pod) extraLines() string {
	var b strings.Builder
	for _, l := range p.extraUserData {
		b.WriteString("        " + l + "\n")
	}
	return b.String()
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

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// syncBuffer collects the monitor's and launcher's output.
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
