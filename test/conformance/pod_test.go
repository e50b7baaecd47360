package conformance

// The pod harness: the minimum of test/integration's harness needed to run
// the real virt-launcher-monitor (and through it virt-launcher) as user
// virtlauncher in a directory laid out like KubeVirt's pod volumes, booting
// the test guest. It deliberately uses no launcher-side client code.

import (
	"bytes"
	"context"
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

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

const bootTimeout = 90 * time.Second

const capNetBindService = 10 // CAP_NET_BIND_SERVICE (linux/capability.h)

var (
	binDir  string // virt-launcher and virt-launcher-monitor
	capsDir string // --qemu-caps-cache shared by the pods
	guest   *testguest.Guest
	cred    *syscall.Credential
	setup   error // why the pod tests cannot run, if they cannot
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "vl-conf-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	setup = prepare(dir)
	return m.Run()
}

// build compiles both binaries (the --help test needs them even without root).
func build(dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/virt-launcher", "./cmd/virt-launcher-monitor")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build launcher: %v\n%s", err, out)
	}
	binDir = dir
	return nil
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

// pod is one launcher pod: its directory and the monitor running in it.
type pod struct {
	t      *testing.T
	dir    string
	layout layout.Layout
	name   string
	ns     string
	uid    string
	// withNet: a masquerade interface on the pod network.
	withNet bool

	cmd     *exec.Cmd
	stdout  *syncBuffer
	stderr  *syncBuffer
	exited  chan struct{}
	exitErr error
}

// startPod lays out the pod (the test guest's root disk as container disk
// 0, its kernel and initrd in kernel-boot/, as virt-handler's mounts would
// provide them) and starts the monitor as user virtlauncher with the flags
// virt-controller's pod template passes. With withNet the VMI has a
// masquerade interface on the pod network, and the pod runs in a network
// namespace of its own whose eth0 and tap virt-handler's privileged phase
// (netsetup.SetupPrivileged, as vlctl run uses it) prepared beforehand.
func startPod(t *testing.T, name string, withNet bool) *pod {
	t.Helper()
	if setup != nil {
		t.Skip(setup)
	}
	dir, err := os.MkdirTemp("", "vc") // short: unix socket paths are limited
	must(t, err)
	p := &pod{t: t, dir: dir, layout: layout.Under(dir), name: name, ns: "conformance", uid: uuid.NewString(),
		withNet: withNet, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	var pn *podnet.Pod
	if withNet {
		// Cleanups run last-in first-out: the network goes after the
		// pod's processes.
		pn = p.network()
	}
	t.Cleanup(p.cleanup)
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	must(t, os.MkdirAll(p.layout.KernelBootDir(), 0o755))
	must(t, guest.CopyRootDisk(p.layout.ContainerDiskImage(0)))
	must(t, os.Chmod(p.layout.ContainerDiskImage(0), 0o444))
	must(t, copyFile(guest.Kernel, filepath.Join(p.layout.KernelBootDir(), "vmlinuz")))
	must(t, copyFile(guest.Initrd, filepath.Join(p.layout.KernelBootDir(), "initrd.img")))
	must(t, os.Chown(p.layout.ShareDir, int(cred.Uid), int(cred.Gid)))
	args := []string{
		"--qemu-timeout", "250s",
		"--name", p.name, "--namespace", p.ns, "--uid", p.uid,
		"--kubevirt-share-dir", p.layout.ShareDir,
		"--ephemeral-disk-dir", p.layout.EphemeralDiskDir,
		"--container-disk-dir", p.layout.ContainerDiskDir,
		"--hotplug-disk-dir", p.layout.HotplugDiskDir,
		"--private-dir", p.layout.PrivateDir,
		"--libvirt-run-dir", p.layout.LibvirtRunDir,
		"--grace-period-seconds", "45",
		"--hook-sidecars", "0",
		"--allow-emulation", "--force-emulation", "--run-as-nonroot",
		"--qemu-caps-cache", capsDir,
	}
	if pn != nil {
		args = append(args, "--resolv-conf", pn.ResolvConf)
	}
	p.cmd = exec.Command(filepath.Join(binDir, "virt-launcher-monitor"), args...)
	p.cmd.Dir = dir
	p.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "VIRT_LAUNCHER_BIN=" + filepath.Join(binDir, "virt-launcher")}
	p.cmd.Stdout = p.stdout
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if pn != nil {
		// The launcher's DHCP server binds port 67 on the bridge: the one
		// capability a KubeVirt launcher pod keeps (compute container
		// capabilities.add NET_BIND_SERVICE).
		p.cmd.SysProcAttr.AmbientCaps = []uintptr{capNetBindService}
		must(t, netsetup.InNS(pn.NS, p.cmd.Start))
	} else {
		must(t, p.cmd.Start())
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

// network makes the pod's network namespace and runs the privileged phase
// for the VMI in it; the caches it writes to the private dir are handed to
// the launcher's user. Removed at cleanup.
func (p *pod) network() *podnet.Pod {
	t := p.t
	t.Helper()
	pn, err := podnet.New(podnet.Config{Dir: p.dir, NoIPv6: true})
	if err != nil {
		os.RemoveAll(p.dir)
		t.Fatalf("pod network: %v", err)
	}
	v, err := loadVMI(p.vmiYAML())
	if err != nil {
		pn.Remove()
		os.RemoveAll(p.dir)
		t.Fatal(err)
	}
	cfg := netsetup.PrivilegedConfig{QemuUID: int(cred.Uid), QemuGID: int(cred.Gid), CacheDir: p.layout.PrivateDir}
	t.Cleanup(func() {
		if err := netsetup.TeardownPrivileged(context.Background(), pn.NS, v, cfg, nil); err != nil {
			t.Errorf("network teardown: %v", err)
		}
		if err := pn.Remove(); err != nil {
			t.Errorf("remove pod network: %v", err)
		}
	})
	must(t, os.MkdirAll(p.layout.PrivateDir, 0o700))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := netsetup.SetupPrivileged(ctx, pn.NS, v, cfg, nil); err != nil {
		t.Fatalf("network privileged phase: %v", err)
	}
	must(t, filepath.Walk(p.layout.PrivateDir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	}))
	return pn
}

// waitReady waits for the rename to launcher-sock, the only name
// virt-handler looks for.
func (p *pod) waitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Lstat(p.layout.ReadySocket()); err == nil {
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

// exitCode waits for the monitor (the compute container's process) to exit.
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

// cleanup kills what is left of this pod only (its process group, then any
// process whose command line names the pod's directory) and removes it.
func (p *pod) cleanup() {
	if p.cmd.Process != nil {
		select {
		case <-p.exited:
		default:
			syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		for _, pid := range processesUnder(p.dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if p.t.Failed() || os.Getenv("VL_KEEP") != "" {
		p.t.Logf("monitor stderr:\n%s\nmonitor stdout:\n%s", p.stderr.String(), p.stdout.String())
	}
	if os.Getenv("VL_KEEP") == "" {
		os.RemoveAll(p.dir)
	}
}

// waitConsole waits until the serial console log shows marker.
func (p *pod) waitConsole(marker string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.layout.SerialLog(p.uid))
		if _, ok := testguest.FindMarker(string(b), marker); ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %s on the console after %v; console:\n%s", marker, timeout, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// assertNothingLeft: no process of the pod survives the monitor.
func (p *pod) assertNothingLeft() {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := processesUnder(p.dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesUnder lists live processes whose command line names dir + "/".
func processesUnder(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir+"/")) {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(st)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// vmiYAML is a VMI that boots the test guest: a containerDisk with
// kernelBoot, an emptyDisk and a cloud-init NoCloud volume.
func (p *pod) vmiYAML() string {
	ifaces, networks := "      autoattachPodInterface: false\n", ""
	if p.withNet {
		ifaces = "      interfaces:\n      - name: default\n        masquerade: {}\n"
		networks = "  networks:\n  - name: default\n    pod: {}\n"
	}
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
%s      disks:
      - name: root
        disk: {bus: virtio}
      - name: scratch
        disk: {bus: virtio}
      - name: cloudinit
        disk: {bus: virtio}
    resources:
      requests:
        memory: 128Mi
%s  volumes:
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
`, p.name, p.ns, p.uid, testguest.DefaultCmdline+" "+testguest.OptNoDHCP, ifaces, networks, p.name)
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

// syncBuffer collects a stream of the monitor.
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

// loadVMI parses and defaults the manifest as virt-api would have (the
// handler sends the stored, defaulted object), in phase Scheduled as at the
// first Sync.
func loadVMI(yaml string) (*v1.VirtualMachineInstance, error) {
	v, err := vmi.Load([]byte(yaml), vmi.Options{})
	if err != nil {
		return nil, fmt.Errorf("load test VMI: %w", err)
	}
	v.Status.Phase = v1.Scheduled
	return v, nil
}
