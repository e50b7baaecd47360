package launchertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Options shape one pod; the zero value is a plain pod in namespace
// "default".
type Options struct {
	Namespace   string        // default "default"
	DirPrefix   string        // temp dir name prefix, default "vl"; keep it short
	QemuTimeout time.Duration // --qemu-timeout, default 3m
	Grace       int           // --grace-period-seconds, default the launcher's
	SharedCaps  bool          // pass --qemu-caps-cache (the first pod still probes)
	ExtraArgs   []string      // more monitor flags
	// SeparateStdout keeps the monitor's stdout apart from its stderr
	// (Pod.Stdout); otherwise both go to Pod.Stderr.
	SeparateStdout bool
	// EphemeralTmpfs mounts a tmpfs of this size (e.g. "128k") as the
	// ephemeral disk directory.
	EphemeralTmpfs string
	// Network gives the VMI a masquerade interface on the pod network and
	// runs the pod in a network namespace of its own whose eth0 and tap
	// virt-handler's privileged phase (netsetup.SetupPrivileged, as vlctl
	// run uses it) prepared beforehand.
	Network bool
	// NetworkPlugin, with Network, binds that interface to this network
	// binding plugin instead, attached as a tap (domainAttachmentType tap,
	// InterfaceDomainAttachment "tap"): the privileged phase makes nothing
	// for it, the test plays the plugin's CNI (InPodNetwork).
	NetworkPlugin string
	// TrackDescendants records the monitor's process tree as it grows, so
	// that AssertNothingLeft also covers processes re-parented away from
	// the monitor, and cleanup kills them.
	TrackDescendants bool
	// LeftWait is how long AssertNothingLeft waits, default 5 s.
	LeftWait time.Duration
	// LogTail limits the output logged for a failed test (0: all; the
	// environment variable VL_FULLLOG lifts the limit).
	LogTail int
	// UID is the VMI's uid; default a new one. Two pods of one VMI (a
	// migration's source and target) share it.
	UID string
	// FixedRoot, when set, is where the launcher sees the pod's
	// directory: the monitor runs in a mount namespace of its own with
	// the directory bound there (pod.BindAt), and its flags name paths
	// below it. FixedRoot must be an empty directory. Two pods with the
	// same FixedRoot see their own files at the same paths, as pods on
	// two nodes do: what a live migration between them needs. The test
	// keeps reaching the pod through Dir and Layout.
	FixedRoot string
	// EtcLibvirt, with FixedRoot, is a directory bound at /etc/libvirt in
	// the pod's mount namespace: where the launcher image has libvirt's
	// hooks (hooks/qemu), which the daemon looks for there whatever its
	// mode.
	EtcLibvirt string
	// PreMigrationHooks passes --libvirt-hook-server-and-client.
	PreMigrationHooks bool
	// ImageVolume lays the pod out as virt-controller renders it with
	// KubeVirt's ImageVolume feature gate (on by default since v1.9) and
	// passes --image-volume; nil is the classic layout, where virt-handler
	// has put disk_0.img and kernel-boot/ into the container-disk directory.
	ImageVolume *ImageVolumeLayout
	// CPUSet, when set, runs the pod in a cpuset cgroup of these host CPUs
	// (internal/hostcpu), as a CPU manager runs a pod with dedicated CPUs;
	// the group is removed once the pod's processes are gone.
	CPUSet []uint
}

// ImageVolumeLayout is what the test guest's images hold with
// Options.ImageVolume. Kubernetes mounts the root disk's container image
// read-only at Layout.ImageVolume(0) (the root volume is volume 0) and the
// kernelBoot container's image read-only at Layout.KernelBootVolumeDir; the
// container-disk directory is not a volume of its own then, only a
// directory of the share dir the launcher creates.
type ImageVolumeLayout struct {
	// DiskFile is the root disk's path inside its image; default
	// /disk/disk.img, the layout of a classic container-disk image.
	DiskFile string
	// DiskPath is the VMI's containerDisk.path; empty lets the launcher
	// search the image, as KubeVirt's does.
	DiskPath string
	// KernelFile and InitrdFile are where the kernel and initrd lie in the
	// kernel-boot image; default /boot/vmlinuz and /boot/initrd.img.
	KernelFile, InitrdFile string
	// KernelPath and InitrdPath are the VMI's kernelPath and initrdPath;
	// default KernelFile and InitrdFile. When they differ, the image holds
	// KernelPath as an absolute symbolic link to KernelFile (and likewise
	// the initrd), as a distribution's /vmlinuz -> /boot/vmlinuz-<version>.
	KernelPath, InitrdPath string
}

func (iv *ImageVolumeLayout) defaults() {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&iv.DiskFile, "/disk/disk.img")
	def(&iv.KernelFile, "/boot/vmlinuz")
	def(&iv.InitrdFile, "/boot/initrd.img")
	def(&iv.KernelPath, iv.KernelFile)
	def(&iv.InitrdPath, iv.InitrdFile)
}

// Pod is one launcher "pod": a directory laid out like KubeVirt's pod
// volumes, and the monitor + launcher running in it.
type Pod struct {
	T      *testing.T
	Env    *Env
	Dir    string
	Layout layout.Layout
	Name   string
	NS     string
	UID    string

	Monitor

	// ExtraUserData lines are appended to the user-data script of VMIYAML.
	ExtraUserData []string

	opts   Options
	pod    *pod.Pod // prepared
	net    *pod.Network
	cgroup *hostcpu.Cgroup
	seen   seenProcs
}

// Monitor is the pod's first process, the monitor, as the test runs it:
// its command, its output, its end and how long it took to be ready.
type Monitor struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *testenv.SyncBuffer // the same buffer unless Options.SeparateStdout
	Exited         chan struct{}
	ExitErr        error // valid once Exited is closed
	Started        time.Time
	Ready          time.Duration // monitor start to launcher-sock

	proc *pod.Process // once started
}

// seenProcs are the descendants of the monitor ever observed, by pid, so
// that one the monitor lost (reparented) still counts as the pod's.
type seenProcs struct {
	mu    sync.Mutex
	byPID map[int]Proc
}

func (s *seenProcs) add(ds []Proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byPID == nil {
		s.byPID = map[int]Proc{}
	}
	for _, d := range ds {
		s.byPID[d.PID] = d
	}
}

// alive are those of them that still run (the same process: not a
// zombie, started when it was seen) and are not in but.
func (s *seenProcs) alive(but []int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pids []int
	for pid, d := range s.byPID {
		if q, ok := ReadProc(pid); ok && q.State != "Z" && q.Start == d.Start && !slices.Contains(but, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// New prepares a pod (see NewDeferred) and starts it.
func (e *Env) New(t *testing.T, name string, o Options) *Pod {
	t.Helper()
	p := e.NewDeferred(t, name, o)
	p.Start()
	return p
}

// NewDeferred lays out the pod under a short temp root (unix socket paths
// are limited to 107 bytes): the pod directories (internal/pod), the test
// guest's root disk as container disk 0 and its kernels (PVH and EFI stub)
// and initrd in kernel-boot/, as virt-handler's mounts would provide them
// (or as image volumes, see Options.ImageVolume). Cmd is the monitor as
// user virtlauncher with the flags virt-controller's pod template passes;
// the caller may change it before Start.
func (e *Env) NewDeferred(t *testing.T, name string, o Options) *Pod {
	t.Helper()
	e.Need(t)
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.DirPrefix == "" {
		o.DirPrefix = "vl"
	}
	if o.QemuTimeout == 0 {
		o.QemuTimeout = 3 * time.Minute
	}
	if o.Grace == 0 {
		o.Grace = int(vmi.DefaultGracePeriodSeconds)
	}
	if o.LeftWait == 0 {
		o.LeftWait = 5 * time.Second
	}
	if o.ImageVolume != nil {
		iv := *o.ImageVolume
		iv.defaults()
		o.ImageVolume = &iv
	}
	dir, err := os.MkdirTemp("", o.DirPrefix)
	Must(t, err)
	p := &Pod{T: t, Env: e, Dir: dir, Layout: layout.Under(dir), Name: name, NS: o.Namespace, UID: cmp.Or(o.UID, uuid.NewString()),
		Monitor: Monitor{Stderr: &testenv.SyncBuffer{}, Exited: make(chan struct{})}, opts: o}
	p.Stdout = p.Stderr
	if o.SeparateStdout {
		p.Stdout = &testenv.SyncBuffer{}
	}
	if o.CPUSet != nil {
		cg, err := hostcpu.NewCgroup("vltest-", o.CPUSet)
		Must(t, err)
		p.cgroup = cg
		// Registered before cleanup, so it runs after: the group can go
		// only once the pod's processes have.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := cg.Remove(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(p.cleanup)
	cred := e.Cred
	root, err := safefs.Open(dir)
	Must(t, err)
	defer root.Close()
	lo := p.LauncherOptions()
	lo.QemuTimeout = o.QemuTimeout
	lo.GracePeriodSeconds = o.Grace
	if o.SharedCaps {
		lo.QemuCapsCache = e.CapsDir
	}
	lo.ImageVolume = o.ImageVolume != nil
	lo.LibvirtHookServerAndClient = o.PreMigrationHooks
	// The pod as vlctl run makes it (internal/pod): root fills its
	// directories, then hands them to the launcher's user.
	spec := pod.Spec{
		Dir: root, Layout: p.Layout, ImageVolume: o.ImageVolume != nil, User: cred, FixedRoot: o.FixedRoot,
		Monitor: filepath.Join(e.BinDir, "virt-launcher-monitor"), Launcher: filepath.Join(e.BinDir, "virt-launcher"),
		Flags: lo, Emulate: true, Extra: o.ExtraArgs,
		Fill: func() error {
			if o.ImageVolume != nil {
				p.placeImageVolumes()
			} else {
				p.placeContainerDisks()
			}
			if o.EphemeralTmpfs != "" {
				mo := fmt.Sprintf("size=%s,mode=0755,uid=%d,gid=%d", o.EphemeralTmpfs, cred.Uid, cred.Gid)
				if out, err := exec.Command("mount", "-t", "tmpfs", "-o", mo, "vltest", p.Layout.EphemeralDiskDir).CombinedOutput(); err != nil {
					return fmt.Errorf("mount tmpfs: %v %s", err, out)
				}
			}
			return nil
		},
		Stdout: p.Stdout, Stderr: p.Stderr,
	}
	if o.Network {
		spec.Network = p.networkConfig()
	}
	if etc := o.EtcLibvirt; etc != "" && o.FixedRoot != "" {
		spec.Enter = []func() error{func() error { return unix.Mount(etc, "/etc/libvirt", "", unix.MS_BIND, "") }}
	}
	if p.cgroup != nil {
		spec.Cgroup = p.cgroup
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p.pod, err = spec.Prepare(ctx)
	Must(t, err)
	p.net = p.pod.Network
	if o.Network && p.net == nil {
		t.Fatal("Options.Network: the pod's VMI has no masquerade or bridge interface")
	}
	p.Cmd = spec.Command(p.net)
	return p
}

// PodArgs are the launcher flags naming the VMI and the pod's directories.
func (p *Pod) PodArgs() []string {
	o := p.LauncherOptions()
	return o.Args()
}

// LauncherOptions are the launcher's defaults with the pod's VMI and
// directories set.
func (p *Pod) LauncherOptions() launcherflags.Options {
	o := launcherflags.Defaults()
	o.Name, o.Namespace, o.UID = p.Name, p.NS, p.UID
	o.SetLayout(p.LauncherLayout())
	return o
}

// LauncherLayout is the pod's layout as the launcher sees it: Layout, or
// the same below Options.FixedRoot.
func (p *Pod) LauncherLayout() layout.Layout {
	return (&pod.Spec{Layout: p.Layout, FixedRoot: p.opts.FixedRoot}).LauncherLayout()
}

// imagesDir holds root's copies of the test guest's images: the unpacked
// images of Options.ImageVolume, which are mounted read-only at the image
// volume mount points, or the files the classic layout links to.
func (p *Pod) imagesDir() string { return filepath.Join(p.Dir, "images") }

// RootImage is the host path of the test guest's root disk image: the
// container disk of the classic layout, or the file inside the image
// volume.
func (p *Pod) RootImage() string {
	if iv := p.opts.ImageVolume; iv != nil {
		return filepath.Join(p.imagesDir(), "disk_0", iv.DiskFile)
	}
	return p.Layout.ContainerDiskImage(0)
}

// placeContainerDisks plays virt-handler for the classic layout: the test
// guest's root disk as container disk 0 and its kernels (PVH and EFI stub)
// and initrd in kernel-boot/. The files are root's and read-only, as
// virt-handler's mounts of container images are, and the pod directories
// hold links to them (as vlctl run's do), so the hand-over leaves them
// root's.
func (p *Pod) placeContainerDisks() {
	t, g := p.T, p.Env.Guest
	dir := p.imagesDir()
	Must(t, os.MkdirAll(dir, 0o755))
	for _, f := range []struct {
		copy      func(dst string) error
		name, dst string
	}{
		{g.CopyRootDisk, "disk_0.img", p.Layout.ContainerDiskImage(0)},
		{copyFrom(g.Kernel), "vmlinuz", filepath.Join(p.Layout.KernelBootDir(), "vmlinuz")},
		{copyFrom(g.EFIKernel), testguest.EFIKernelName, filepath.Join(p.Layout.KernelBootDir(), testguest.EFIKernelName)},
		{copyFrom(g.Initrd), "initrd.img", filepath.Join(p.Layout.KernelBootDir(), "initrd.img")},
	} {
		src := filepath.Join(dir, f.name)
		Must(t, f.copy(src))
		Must(t, os.Chmod(src, 0o444))
		Must(t, os.Symlink(src, f.dst))
	}
}

// copyFrom copies src to the destination it is given.
func copyFrom(src string) func(dst string) error {
	return func(dst string) error { return CopyFile(src, dst) }
}

// placeImageVolumes unpacks the test guest's two images (root-owned, files
// read-only) and mounts them read-only, nosuid and nodev where
// virt-controller's pod template mounts image volumes.
func (p *Pod) placeImageVolumes() {
	t, iv, g := p.T, p.opts.ImageVolume, p.Env.Guest
	disk, kernel := filepath.Join(p.imagesDir(), "disk_0"), filepath.Join(p.imagesDir(), "kernel-boot")
	put := func(root, file string, copy func(dst string) error) {
		dst := filepath.Join(root, file)
		Must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		Must(t, copy(dst))
		Must(t, os.Chmod(dst, 0o444))
	}
	put(disk, iv.DiskFile, g.CopyRootDisk)
	put(kernel, iv.KernelFile, copyFrom(g.Kernel))
	put(kernel, iv.InitrdFile, copyFrom(g.Initrd))
	for _, l := range [][2]string{{iv.KernelPath, iv.KernelFile}, {iv.InitrdPath, iv.InitrdFile}} {
		if l[0] != l[1] {
			link := filepath.Join(kernel, l[0])
			Must(t, os.MkdirAll(filepath.Dir(link), 0o755))
			Must(t, os.Symlink(l[1], link))
		}
	}
	for _, m := range [][2]string{{disk, p.Layout.ImageVolume(0)}, {kernel, p.Layout.KernelBootVolumeDir}} {
		Must(t, os.MkdirAll(m[1], 0o755))
		if err := syscall.Mount(m[0], m[1], "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mount %s at %s: %v", m[0], m[1], err)
		}
		if err := syscall.Mount("", m[1], "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
			t.Fatalf("make %s read-only: %v", m[1], err)
		}
	}
}

// SetEnv adds an environment variable for the monitor (before Start).
func (p *Pod) SetEnv(k, v string) { p.Cmd.Env = append(p.Cmd.Env, k+"="+v) }

// Start runs Cmd in the pod's namespaces (pod.Pod.Start): its network
// with Options.Network, Options.FixedRoot, its cgroup with Options.CPUSet.
func (p *Pod) Start() {
	p.T.Helper()
	p.Started = time.Now()
	p.pod.Cmd = p.Cmd
	err := p.pod.Start()
	Must(p.T, errors.Join(err, p.pod.Unplaced))
	proc := p.pod.Process
	p.proc = proc
	go func() {
		p.ExitErr = proc.Err()
		close(p.Exited)
	}()
	if p.opts.TrackDescendants {
		go func() {
			for {
				select {
				case <-p.Exited:
					return
				case <-time.After(200 * time.Millisecond):
					p.Descendants()
				}
			}
		}()
	}
}

// WaitReady waits for the rename to launcher-sock, the only name
// virt-handler looks for.
func (p *Pod) WaitReady(timeout time.Duration) {
	p.T.Helper()
	if p.proc == nil {
		p.T.Fatal("WaitReady before Start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.proc.WaitReady(ctx, p.Layout.ReadySocket()); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			p.T.Fatalf("no %s after %v:\n%s", p.Layout.ReadySocket(), timeout, p.Stderr.String())
		}
		p.T.Fatalf("launcher exited before it was ready (%v):\n%s", err, p.Stderr.String())
	}
	p.Ready = time.Since(p.Started)
}

// Client dials launcher-sock with the launcher's own client; closed at
// cleanup.
func (p *Pod) Client(ctx context.Context) *cmdclient.Client {
	p.T.Helper()
	c, err := cmdclient.Dial(ctx, p.Layout.ReadySocket())
	if err != nil {
		p.T.Fatalf("dial launcher: %v", err)
	}
	p.T.Cleanup(func() { c.Close() })
	return c
}

// ExitCode waits for the monitor (the compute container's process) to
// exit and returns its status.
func (p *Pod) ExitCode(timeout time.Duration) int {
	p.T.Helper()
	select {
	case <-p.Exited:
	case <-time.After(timeout):
		p.T.Fatalf("monitor still running after %v:\n%s", timeout, p.Stderr.String())
	}
	if p.ExitErr == nil {
		return 0
	}
	if ee, ok := p.ExitErr.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	p.T.Fatalf("wait: %v", p.ExitErr)
	return -1
}

// Running reports whether the monitor has not exited yet (true before
// Start).
func (p *Pod) Running() bool { return p.proc == nil || !p.proc.Exited() }

// Signal sends sig to the monitor.
func (p *Pod) Signal(sig syscall.Signal) {
	p.T.Helper()
	Must(p.T, p.Cmd.Process.Signal(sig))
}

// cleanup kills what is left of this pod only (its process group, the
// descendants seen, then any process whose command line names the pod's
// directory) and removes the directory (kept with VL_KEEP set).
func (p *Pod) cleanup() {
	if p.Cmd != nil && p.Cmd.Process != nil {
		if p.Running() {
			if p.opts.TrackDescendants {
				p.Descendants() // the tree as it is, before the kill orphans it
			}
			syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		}
		if err := pod.EndProcesses(context.Background(), p.left, pod.EndOptions{}); err != nil {
			p.T.Errorf("pod %s: %v", p.Dir, err)
		}
		<-p.Exited
	}
	if p.T.Failed() || os.Getenv("VL_KEEP") != "" {
		n := p.opts.LogTail
		if n == 0 || os.Getenv("VL_FULLLOG") != "" {
			n = 1 << 30
		}
		if p.Stdout != p.Stderr {
			p.T.Logf("monitor stderr:\n%s\nmonitor stdout:\n%s", Tail(p.Stderr.String(), n), Tail(p.Stdout.String(), n))
		} else {
			p.T.Logf("monitor/launcher output:\n%s", Tail(p.Stderr.String(), n))
		}
	}
	if p.opts.EphemeralTmpfs != "" {
		syscall.Unmount(p.Layout.EphemeralDiskDir, syscall.MNT_DETACH)
	}
	if p.opts.ImageVolume != nil {
		syscall.Unmount(p.Layout.ImageVolume(0), syscall.MNT_DETACH)
		syscall.Unmount(p.Layout.KernelBootVolumeDir, syscall.MNT_DETACH)
	}
	// The network goes after the pod's processes, before its directory
	// (the restore state is there).
	if p.net != nil {
		if err := p.net.Close(); err != nil {
			p.T.Errorf("%v", err)
		}
	}
	if os.Getenv("VL_KEEP") == "" {
		os.RemoveAll(p.Dir)
	}
}

// DomainName is the libvirt domain's name.
func (p *Pod) DomainName() string { return p.NS + "_" + p.Name }

// QemuPid reads the pid libvirt recorded for the domain.
func (p *Pod) QemuPid() int {
	p.T.Helper()
	b, err := os.ReadFile(filepath.Join(p.Layout.LibvirtRunDir, "libvirt", "qemu", "run", p.DomainName()+".pid"))
	if err != nil {
		p.T.Fatalf("QEMU pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	Must(p.T, err)
	return pid
}

// Libvirt is a connection of the test's own to the pod's session-mode
// libvirt daemon (by KubeVirt's socket name, as virt-handler reaches it),
// closed when the test ends: for reading what the launcher does not
// report, or changing the domain behind the launcher's back.
func (p *Pod) Libvirt() *libvirt.Libvirt {
	p.T.Helper()
	sock := filepath.Join(p.Layout.LibvirtRunDir, "libvirt", "virtqemud-sock")
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(sock), dialers.WithLocalTimeout(5*time.Second)))
	if err := l.ConnectToURI(libvirt.ConnectURI("qemu:///session")); err != nil {
		p.T.Fatalf("connect to the pod's libvirt daemon: %v", err)
	}
	p.T.Cleanup(func() { l.Disconnect() })
	return l
}

// Console is the serial console log (written from the first byte, so
// nothing is missed between start and connect).
func (p *Pod) Console() string {
	b, _ := os.ReadFile(p.Layout.SerialLog(p.UID))
	return string(b)
}

// WaitConsole waits until the console shows marker and returns what
// follows it.
func (p *Pod) WaitConsole(marker string, timeout time.Duration) string {
	p.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := p.Console()
		if rest, ok := testguest.FindMarker(out, marker); ok {
			return rest
		}
		if time.Now().After(deadline) {
			p.T.Fatalf("no %s on the console after %v; console:\n%s\nlauncher:\n%s", marker, timeout, Tail(out, 8000), Tail(p.Stderr.String(), 8000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Descendants lists the live processes under the monitor (by ppid chain)
// and remembers them for AssertNothingLeft.
func (p *Pod) Descendants() []Proc {
	if p.Cmd.Process == nil {
		return nil
	}
	ds := DescendantsOf(p.Cmd.Process.Pid)
	p.seen.add(ds)
	return ds
}

// Child returns the first live descendant named one of names (0 if none).
func (p *Pod) Child(names ...string) int {
	for _, d := range p.Descendants() {
		for _, n := range names {
			if d.Comm == n {
				return d.PID
			}
		}
	}
	return 0
}

// MustChild is Child failing the test when there is none.
func (p *Pod) MustChild(names ...string) int {
	p.T.Helper()
	if pid := p.Child(names...); pid != 0 {
		return pid
	}
	p.T.Fatalf("no descendant %v of the monitor; tree: %v", names, p.Descendants())
	return 0
}

// AssertNothingLeft checks that no process of the pod survives: neither
// one ever seen under the monitor (Options.TrackDescendants) nor one whose
// command line names the pod directory.
func (p *Pod) AssertNothingLeft() {
	p.T.Helper()
	deadline := time.Now().Add(p.opts.LeftWait)
	for {
		var left []string
		for _, pid := range p.left() {
			c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			left = append(left, fmt.Sprintf("%d(%s)", pid, strings.TrimSpace(string(c))))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.T.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// left lists the pod's living processes (a pod.Selector): those ever seen
// under the monitor (Options.TrackDescendants) that still run, and those
// of the pod's directory (pod.Under).
func (p *Pod) left() []int {
	pids := pod.Under(p.Dir)()
	return append(pids, p.seen.alive(pids)...)
}

// Options is what the pod was made with (defaults filled in).
func (p *Pod) Options() Options { return p.opts }
