package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

type ids struct{ uid, gid int }

func lookupUser(name string) (ids, error) {
	uid, gid, err := pod.LookupUser(name)
	return ids{uid, gid}, err
}

// instance is one launcher run driven the way virt-handler drives it: a
// pod-like work directory, a notify server on the share dir's
// domain-notify-pipe.sock, the monitor started as the unprivileged user,
// the command socket for Sync and the lifecycle verbs, and the serial
// console read for the guest's markers.
type instance struct {
	env  *env
	img  *podImage // the pod's root file system; nil: the host's (no chroot)
	name string
	dir  string
	lay  layout.Layout
	// pod is the pod, prepared; its Spec.FixedRoot, set before start,
	// is where the launcher sees the pod's directory: the two pods of a
	// migration see their own files at one path.
	pod *pod.Pod
	// monitorEnv is added to the monitor's environment (the restart
	// part raises its restart budget).
	monitorEnv []string
	vmi        *v1.VirtualMachineInstance
	client     *cmdclient.Client

	mon *pod.Process // once started
	startStamps
	launcher launcherExit
	events   domainEvents

	console *console
}

// startStamps are the times of an instance's start, all from the
// monitor's exec.
type startStamps struct {
	execAt                                 time.Time
	virtlogdSockAt, libvirtSockAt, readyAt time.Time
	syncSentAt, syncDoneAt                 time.Time
}

// launcherExit is the launcher process, once found, and when it was gone:
// the bench times the launcher's own exit apart from the monitor's.
type launcherExit struct {
	proc proc

	mu sync.Mutex
	at time.Time
}

// watch polls the launcher process every 0.5 ms until it is gone or the
// monitor (mon) has ended.
func (l *launcherExit) watch(mon *pod.Process) {
	if l.proc.pid == 0 {
		return
	}
	for alive(l.proc) {
		select {
		case <-mon.Done():
			l.mu.Lock()
			l.at = mon.EndedAt()
			l.mu.Unlock()
			return
		default:
		}
		time.Sleep(500 * time.Microsecond)
	}
	l.mu.Lock()
	l.at = time.Now()
	l.mu.Unlock()
}

// gone is when the launcher was gone; zero while it runs or if it was
// never found.
func (l *launcherExit) gone() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at
}

// newInstance lays out a work directory for the test guest named name. A
// non-empty seed is a capability cache directory copied into the daemon's
// XDG cache before start. kernelArgs are added to the guest's command line
// (testguest.Opt*).
func newInstance(ctx context.Context, e *env, name, seed string, kernelArgs ...string) (*instance, error) {
	return newInstanceIn(ctx, e, nil, name, seed, kernelArgs...)
}

// newInstanceIn is newInstance for a pod whose root is img (nil: the
// host's).
func newInstanceIn(ctx context.Context, e *env, img *podImage, name, seed string, kernelArgs ...string) (*instance, error) {
	// Short names: libvirt builds unix socket paths under the private dir
	// from it and the domain name, and sun_path holds 107 bytes.
	dir, err := os.MkdirTemp(e.workRoot, "")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	in := &instance{env: e, img: img, name: name, dir: dir, lay: layout.Under(dir)}
	in.events.ch = make(chan struct{})
	if img != nil {
		in.lay = layout.Rooted(filepath.Join(dir, "run"))
	}
	if err := in.prepare(ctx, seed, kernelArgs); err != nil {
		in.cleanup()
		return nil, err
	}
	return in, nil
}

func (in *instance) prepare(ctx context.Context, seed string, kernelArgs []string) error {
	manifest := filepath.Join(in.dir, "vmi.yaml")
	out, err := exec.CommandContext(ctx, filepath.Join(in.env.binDir, "vlctl"), "testguest", "--no-network", "--name", in.name).Output()
	if err != nil {
		return fmt.Errorf("vlctl testguest: %w", exitText(err))
	}
	if err := os.WriteFile(manifest, out, 0o644); err != nil {
		return err
	}
	v, err := vmi.LoadFile(manifest, vmi.Options{})
	if err != nil {
		return err
	}
	if kb := v.Spec.Domain.Firmware.KernelBoot; len(kernelArgs) > 0 && kb != nil {
		kb.KernelArgs = strings.Join(append([]string{kb.KernelArgs}, kernelArgs...), " ")
	} else if len(kernelArgs) > 0 {
		return fmt.Errorf("the test guest manifest has no kernelBoot to add %v to", kernelArgs)
	}
	in.vmi = v
	root, err := safefs.Open(in.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	// The pod as vlctl run makes it (internal/pod): root fills its
	// directories, then hands them to the launcher's user.
	spec := pod.Spec{
		Dir: root, Layout: in.lay,
		User:    &syscall.Credential{Uid: uint32(in.env.owner.uid), Gid: uint32(in.env.owner.gid)},
		Monitor: filepath.Join(in.env.binDir, "virt-launcher-monitor"), Launcher: filepath.Join(in.env.binDir, "virt-launcher"),
		Emulate: true,
		Fill: func() error {
			if err := in.linkImages(); err != nil {
				return err
			}
			if seed != "" {
				if err := copyDir(seed, in.capsDir()); err != nil {
					return fmt.Errorf("seed capability cache: %w", err)
				}
			}
			// virt-handler's notify server; the hand-over gives its
			// socket to the launcher's user, who must be able to
			// connect.
			ns, err := notifytest.Start(in.lay.NotifySocket())
			if err != nil {
				return err
			}
			in.events.server = ns
			return nil
		},
	}
	if in.pod, err = spec.Prepare(ctx); err != nil {
		return err
	}
	go in.events.record(ctx)
	return nil
}

// capsDir is where the session daemon keeps its QEMU capability cache,
// with XDG_CACHE_HOME the private dir (internal/launcher's libvirtdConfig).
func (in *instance) capsDir() string { return capsCacheDir(in.lay.PrivateDir) }

// capsCacheDir is the capability cache of a session daemon with the given
// XDG_CACHE_HOME.
func capsCacheDir(cacheHome string) string {
	return libvirtd.Config{CacheHome: cacheHome}.CapabilitiesCacheDir()
}

func (in *instance) linkImages() error {
	for i, vol := range in.vmi.Spec.Volumes {
		if vol.ContainerDisk != nil {
			if err := os.Symlink(vol.ContainerDisk.Image, in.lay.ContainerDiskImage(i)); err != nil {
				return fmt.Errorf("link container disk: %w", err)
			}
		}
	}
	fw := in.vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil {
		return errors.New("test guest manifest has no kernelBoot container")
	}
	c := fw.KernelBoot.Container
	for _, p := range []string{c.KernelPath, c.InitrdPath} {
		if err := os.Symlink(filepath.Join(c.Image, p), filepath.Join(in.lay.KernelBootDir(), filepath.Base(p))); err != nil {
			return fmt.Errorf("link kernel boot file: %w", err)
		}
	}
	return nil
}

// waitEvent waits for the first event after since that match accepts.
func (in *instance) waitEvent(ctx context.Context, since time.Time, what string, match func(stamped) bool) (time.Time, error) {
	for {
		at, ok, next := in.events.first(since, match)
		if ok {
			return at, nil
		}
		select {
		case <-next:
		case <-in.mon.Done():
			// A last check: the event may have come with the exit.
			if at, ok, _ := in.events.first(since, match); ok {
				return at, nil
			}
			return time.Time{}, in.withLog(fmt.Errorf("launcher exited (%v) before event %s", in.mon.Err(), what))
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for event %s: %w", what, ctx.Err())
		}
	}
}

func isStatus(s string) func(stamped) bool {
	return func(e stamped) bool { return e.status == s && !e.deleted }
}

// start execs the monitor as the unprivileged user with the flags
// internal/standalone passes, and watches its sockets appear.
func (in *instance) start() error {
	if in.img != nil {
		return in.startPod()
	}
	logFile, err := os.OpenFile(in.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// The VMI's flags as at the start: a migration's target takes the
	// source's VMI.
	o := launcherflags.ForVMI(in.vmi)
	o.QemuTimeout = 5 * time.Minute
	in.pod.Spec.Flags = o
	in.pod.Spec.Env = in.monitorEnv
	in.pod.Spec.Stdout, in.pod.Spec.Stderr = logFile, logFile
	return in.run(in.pod.Spec.Command(nil))
}

// run starts the pod's first process, cmd, and stamps its exec.
func (in *instance) run(cmd *exec.Cmd) error {
	in.execAt = time.Now()
	in.pod.Cmd = cmd
	if err := in.pod.Start(); err != nil {
		return fmt.Errorf("start monitor: %w", err)
	}
	in.mon = in.pod.Process
	return nil
}

func (in *instance) logPath() string { return filepath.Join(in.dir, "launcher.log") }

// libvirtSocket is the session daemon's socket: XDG_RUNTIME_DIR is the
// libvirt run dir (its base is not "libvirt"), sockets go to <it>/libvirt.
func (in *instance) libvirtSocket() string {
	return filepath.Join(in.libvirtSocketDir(), "libvirt-sock")
}

// libvirtSocketDir holds the daemons' sockets: in a pod XDG_RUNTIME_DIR
// is /var/run, whose libvirt/ is the libvirt run dir itself.
func (in *instance) libvirtSocketDir() string {
	if in.img != nil {
		return in.lay.LibvirtRunDir
	}
	return filepath.Join(in.lay.LibvirtRunDir, "libvirt")
}

// waitReady polls (every 0.5 ms, for the stamps) for the libvirt socket
// and launcher-sock, then dials the command socket.
func (in *instance) waitReady(ctx context.Context) error {
	const wait = 90 * time.Second
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := in.mon.WaitFor(wctx, 500*time.Microsecond, func(now time.Time) bool {
		if in.virtlogdSockAt.IsZero() && exists(filepath.Join(in.libvirtSocketDir(), "virtlogd-sock")) {
			in.virtlogdSockAt = now
		}
		if in.libvirtSockAt.IsZero() && exists(in.libvirtSocket()) {
			in.libvirtSockAt = now
		}
		if exists(in.lay.ReadySocket()) {
			in.readyAt = now
			return true
		}
		return false
	})
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		return in.withLog(fmt.Errorf("launcher not ready after %v", wait))
	case err != nil:
		return in.withLog(fmt.Errorf("launcher not ready: %w", err))
	}
	c, err := cmdclient.Dial(ctx, in.lay.ReadySocket())
	if err != nil {
		return fmt.Errorf("dial launcher: %w", err)
	}
	in.client = c
	return nil
}

// exists follows links: KubeVirt's virtqemud-sock is a link made before
// the daemon binds the socket it names.
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// firstSync sends the first Sync and starts reading the console at once.
func (in *instance) firstSync(ctx context.Context) error {
	in.console = newConsole(in.lay.SerialSocket(string(in.vmi.UID)))
	in.syncSentAt = time.Now()
	go in.console.run(ctx, in.mon.Done())
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err := in.client.Sync(sctx, in.vmi, cmdclient.HandlerSyncOptions())
	in.syncDoneAt = time.Now()
	if err != nil {
		return in.withLog(fmt.Errorf("sync: %w", err))
	}
	return nil
}

// domainStats times a GetDomainStats call, as virt-handler's metrics
// collector makes it, and checks the answer has what the collector reads.
func (in *instance) domainStats(ctx context.Context) (time.Duration, error) {
	d, s, err := in.domainStatsAnswer(ctx)
	if err != nil {
		return 0, err
	}
	if err := checkStats(s); err != nil {
		if len(s) > 300 {
			s = s[:300] + "..."
		}
		return 0, fmt.Errorf("GetDomainStats: %w: %s", err, s)
	}
	return d, nil
}

// domainStatsAnswer times one GetDomainStats and returns its answer
// unchecked.
func (in *instance) domainStatsAnswer(ctx context.Context) (time.Duration, string, error) {
	sctx, cancel := context.WithTimeout(ctx, cmdclient.ShortTimeout)
	defer cancel()
	t := time.Now()
	s, err := in.client.GetDomainStats(sctx)
	d := time.Since(t)
	if err != nil {
		return 0, "", fmt.Errorf("GetDomainStats: %w", err)
	}
	return d, s, nil
}

// checkStats makes sure a stats answer carries the fields virt-handler's
// collectors read: CPU time, vCPUs, disks with the VMI's names, the vCPU
// pinning. A figure for an answer without them would flatter.
func checkStats(s string) error {
	var st struct {
		Cpu       *struct{ TimeSet bool } //nolint:revive // KubeVirt's key.
		Vcpu      []struct{ TimeSet bool }
		Block     []struct{ Alias string }
		CPUMapSet bool
	}
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		return fmt.Errorf("stats JSON: %w", err)
	}
	var missing []string
	if st.Cpu == nil || !st.Cpu.TimeSet {
		missing = append(missing, "Cpu.Time")
	}
	if len(st.Vcpu) == 0 || !st.Vcpu[0].TimeSet {
		missing = append(missing, "Vcpu[0].Time")
	}
	if len(st.Block) == 0 || st.Block[0].Alias == "" {
		missing = append(missing, "Block[0].Alias")
	}
	if !st.CPUMapSet {
		missing = append(missing, "CPUMap")
	}
	if len(missing) > 0 {
		return fmt.Errorf("stats lack %s", strings.Join(missing, ", "))
	}
	return nil
}

// repeatSync times a Sync of the running domain.
func (in *instance) repeatSync(ctx context.Context) (time.Duration, error) {
	sctx, cancel := context.WithTimeout(ctx, cmdclient.LongTimeout)
	defer cancel()
	t := time.Now()
	if err := in.client.Sync(sctx, in.vmi, cmdclient.HandlerSyncOptions()); err != nil {
		return 0, fmt.Errorf("repeated sync: %w", err)
	}
	return time.Since(t), nil
}

// findLauncher remembers the launcher process, to time its exit.
// procs are the launcher's processes: those naming its directory, or in a
// pod every process of the pod.
func (in *instance) procs() []proc {
	if in.img != nil {
		return in.podProcs()
	}
	return procsUnder(in.dir)
}

func (in *instance) findLauncher() {
	for _, p := range in.procs() {
		if roleOf(p) == roleLauncher {
			in.launcher.proc = p
			return
		}
	}
}

// shutdownAndDelete does what virt-handler does when a VMI is deleted and
// the guest cooperates: ACPI shutdown, wait for Shutoff, then (after
// between, if set) Delete, and waits for the launcher's end. It returns the
// stamps of each step.
type endStamps struct {
	shutdownSent, shutoff, deleteSent, finalEvent, launcherExit, monitorExit time.Time
}

func (in *instance) shutdownAndDelete(ctx context.Context, between func() error) (endStamps, error) {
	var s endStamps
	in.findLauncher()
	sctx, cancel := context.WithTimeout(ctx, cmdclient.LongTimeout)
	s.shutdownSent = time.Now()
	err := in.client.Shutdown(sctx, in.vmi)
	cancel()
	if err != nil {
		return s, fmt.Errorf("shutdown: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	s.shutoff, err = in.waitEvent(wctx, s.shutdownSent, "Shutoff", isStatus("Shutoff"))
	cancel()
	if err != nil {
		return s, err
	}
	if between != nil {
		if err := between(); err != nil {
			return s, err
		}
	}
	go in.launcher.watch(in.mon)
	dctx, cancel := context.WithTimeout(ctx, cmdclient.LongTimeout)
	s.deleteSent = time.Now()
	err = in.client.Delete(dctx, in.vmi)
	cancel()
	if err != nil && !cmdclient.IsDisconnected(err) {
		return s, fmt.Errorf("delete: %w", err)
	}
	wctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.finalEvent, err = in.waitEvent(wctx, s.shutoff, "final (deleted)", func(e stamped) bool { return e.deleted })
	if err != nil {
		return s, err
	}
	select {
	case <-in.mon.Done():
	case <-wctx.Done():
		return s, in.withLog(errors.New("launcher did not exit within 30 s of Delete"))
	}
	s.monitorExit = in.mon.EndedAt()
	s.launcherExit = in.launcher.gone()
	if in.mon.Err() != nil {
		return s, in.withLog(fmt.Errorf("launcher ended with %v", in.mon.Err()))
	}
	return s, nil
}

// withLog adds the end of the launcher's log to err.
func (in *instance) withLog(err error) error {
	b, rerr := os.ReadFile(in.logPath())
	if rerr != nil || len(b) == 0 {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return fmt.Errorf("%s [%s]: %w\nlast launcher log lines:\n%s", in.name, in.dir, err, strings.Join(lines, "\n"))
}

// cleanup stops whatever still runs of this instance and removes its
// directory (unless -keep).
func (in *instance) cleanup() {
	if in.client != nil {
		in.client.Close()
	}
	if in.mon != nil {
		select {
		case <-in.mon.Done():
		default:
			in.mon.Cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-in.mon.Done():
			case <-time.After(40 * time.Second):
			}
		}
	}
	if in.img != nil {
		in.killPod()
	} else {
		killUnder(in.dir, 10*time.Second)
	}
	if in.mon != nil {
		select {
		case <-in.mon.Done():
		case <-time.After(5 * time.Second):
			syscall.Kill(-in.mon.Cmd.Process.Pid, syscall.SIGKILL)
			<-in.mon.Done()
		}
	}
	if in.events.server != nil {
		in.events.server.Stop()
	}
	if in.env.keep {
		in.env.logf("kept %s", in.dir)
		return
	}
	os.RemoveAll(in.dir)
}

// copyDir copies the regular files of src into dst (created).
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func exitText(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
