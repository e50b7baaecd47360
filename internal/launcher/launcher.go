package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/devinfo"
	"github.com/virtlauncher/virtlauncher/internal/disks"
	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/hooks"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
	"github.com/virtlauncher/virtlauncher/internal/logging"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// SignalHandOver asks a launcher whose guest runs to leave it to a new
// launcher (ExitHandOver): an upgrade of the launcher binary without a
// migration. The pod's monitor forwards it.
const SignalHandOver = syscall.SIGUSR2

// Exit codes (kubevirt-wire.md 5.6).
const (
	ExitOK       = 0 // the domain is gone (or SIGTERM came before any domain)
	ExitQEMUDied = 1 // QEMU ended abnormally (killed, crashed)
	ExitFatal    = 2 // fatal start-up error
	// ExitHandOver: the launcher left on SIGUSR2 with the guest running,
	// for a new launcher (the binary at the same path, perhaps a newer
	// one) to take it over; the monitor starts it.
	ExitHandOver = 3
)

// EnvStandaloneVMI holds a VMI (YAML or JSON) to sync at start-up.
const EnvStandaloneVMI = "STANDALONE_VMI"

// Timeouts of the shutdown path.
const (
	selfCheckTimeout = 15 * time.Second
	finalEventWait   = 15 * time.Second
	acpiResend       = 5 * time.Second
	destroyWait      = 30 * time.Second
	// shutdownCallBound bounds each call to the daemon while the pod
	// terminates.
	shutdownCallBound = 10 * time.Second
	daemonStopWait    = 10 * time.Second
)

// Launcher is one run of virt-launcher.
type Launcher struct {
	opts   *launcherflags.Options
	log    *slog.Logger
	layout layout.Layout
	// Events overrides the event sink (tests); nil means the notify client
	// on the share dir's domain-notify-pipe.sock.
	Events domain.EventSink
	// Signals delivers termination requests, HandOver hand-over requests;
	// a nil Signals means SIGTERM and SIGINT, and SignalHandOver.
	Signals, HandOver <-chan os.Signal

	daemon *libvirtd.Daemon
	mgr    *domain.Manager
	hooks  *hooks.Manager
	// leaving is set while a panic unwinds run, or when the launcher
	// hands over: what the next launcher takes over (launcher-sock, the
	// daemon's domain state) is left alone.
	leaving bool
}

// New prepares a launcher.
func New(opts *launcherflags.Options, log *slog.Logger) *Launcher {
	return &Launcher{opts: opts, log: log, layout: opts.Layout()}
}

type fatalError struct{ err error }

func (f fatalError) Error() string { return f.err.Error() }
func (f fatalError) Unwrap() error { return f.err }

func fatal(format string, args ...any) error { return fatalError{fmt.Errorf(format, args...)} }

// Run runs the launcher to the end and returns its exit code.
func (l *Launcher) Run(ctx context.Context) int {
	code, err := l.run(ctx)
	if err != nil {
		l.log.Error("virt-launcher failed", "reason", err.Error())
	}
	return code
}

func (l *Launcher) run(ctx context.Context) (int, error) {
	t0 := time.Now()
	if l.opts.SimulateCrash {
		return ExitFatal, errors.New("--simulate-crash: exiting as asked")
	}
	sigs, handOver := l.Signals, l.HandOver
	if sigs == nil {
		ch := make(chan os.Signal, 2)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(ch)
		sigs = ch
		hch := make(chan os.Signal, 1)
		signal.Notify(hch, SignalHandOver)
		defer signal.Stop(hch)
		handOver = hch
	}

	if err := l.makeDirs(); err != nil {
		return ExitFatal, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// 0. the hook sidecars
	hm, err := l.collectHooks(ctx, sigs)
	if errors.Is(err, errSignalled) {
		return ExitOK, nil
	} else if err != nil {
		return ExitFatal, fatal("%w", err)
	}
	l.hooks = hm
	defer hm.Close()

	// 1. the daemons
	root := os.Geteuid() == 0
	if err := l.startDaemons(ctx, root); err != nil {
		return ExitFatal, err
	}
	defer l.stopDaemons()
	// The host UUID is what libvirt compares to refuse a migration to
	// "the same host": logged so that a refused migration can be told
	// from the two pods' logs.
	l.log.Info("libvirt daemons up", "daemon", l.daemon.Kind(), "socket", l.daemon.Socket(), "hostUUID", l.daemon.HostUUID(), "took", time.Since(t0).String())

	// 2. the domain manager: connect and subscribe to events
	mctx, stopManager, err := l.startManager(ctx, hm, root)
	defer stopManager()
	if err != nil {
		return ExitFatal, err
	}

	// 3. the command server, its self-check, and the readiness rename
	stopServer, err := l.serveCommands(ctx)
	defer func() {
		// A panic unwinding through here leaves launcher-sock in place:
		// the monitor starts a new launcher, which serves it again, and
		// virt-handler takes a missing socket for a launcher gone for
		// good (it fails the VMI at once).
		if r := recover(); r != nil {
			l.leaving = true
			panic(r)
		}
		stopServer()
	}()
	if err != nil {
		return ExitFatal, err
	}
	l.log.Info("ready", "socket", l.layout.ReadySocket(), "took", time.Since(t0).String())

	// 4. standalone: sync the VMI from the environment
	if err := l.syncStandalone(ctx); err != nil {
		return ExitFatal, err
	}

	// 5. wait for a domain
	if code, end, err := l.waitDefined(ctx, sigs); end {
		return code, err
	}

	// 6. run until QEMU is gone
	if !l.opts.Virtlogd {
		go capLog(mctx, l.layout.SerialLog(l.opts.UID), serialLogMax, logCapEvery, l.log)
	}
	destroyed := false
	select {
	case <-l.mgr.Stopped():
	case <-handOver:
		// The deferred stops end the command server gracefully (calls
		// under way finish) and wait for the operation in progress; the
		// socket file, the daemon and its domain state stay for the next
		// launcher, as after a crash.
		l.log.Info("handing over to a new launcher: the guest runs on", "signal", SignalHandOver.String(), "exit", ExitHandOver)
		l.leaving = true
		return ExitHandOver, nil
	case sig := <-sigs:
		l.log.Info("received signal, shutting the guest down", "signal", sig.String(), "gracePeriodSeconds", l.opts.GracePeriodSeconds)
		l.beginTermination()
		destroyed = l.gracefulShutdown(ctx, sigs)
	case <-ctx.Done():
		destroyed = l.gracefulShutdown(context.Background(), sigs)
	}
	return l.finish(destroyed), nil
}

// startDaemons starts the private libvirt daemon(s) (60 s at most).
func (l *Launcher) startDaemons(ctx context.Context, root bool) error {
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	defer dcancel()
	cfg := l.libvirtdConfig(root)
	cfg.HostUUID = l.hostUUID()
	d, err := libvirtd.Start(dctx, cfg, l.log)
	if err != nil {
		return fatal("start libvirt: %w", err)
	}
	l.daemon = d
	return nil
}

// stateFile is where the domain manager keeps what a launcher taking over
// this pod's guest must know (domain.State).
func (l *Launcher) stateFile() string {
	return filepath.Join(l.layout.PrivateDir, domain.StateFileName)
}

// hostUUID is the daemon's host UUID: the one the pod's previous launcher
// gave its daemon, when one ran here before (it died and this launcher
// takes its guest over: the host stays the same), else a new one.
func (l *Launcher) hostUUID() string {
	s, ok, err := domain.LoadState(l.stateFile())
	switch {
	case err != nil:
		l.log.Warn("the state of the pod's previous launcher cannot be read; a new host UUID", "reason", err.Error())
	case ok && s.HostUUID != "":
		if _, perr := uuid.Parse(s.HostUUID); perr == nil {
			l.log.Info("keeping the host UUID of the pod's previous launcher", "hostUUID", s.HostUUID)
			return s.HostUUID
		}
		l.log.Warn("the previous launcher's host UUID is not a UUID; a new one", "hostUUID", s.HostUUID)
	}
	return uuid.NewString()
}

// startManager makes the domain manager, runs it and waits until it is
// connected to the daemon; it then has the daemon probe QEMU in the
// background. The context it returns lives until stop, which is never nil
// and must be called whatever the error.
func (l *Launcher) startManager(ctx context.Context, hm *hooks.Manager, root bool) (context.Context, func(), error) {
	emulation, hvErr := hypervisor(l.opts)
	cpus, numa := podCPUs(l.log)
	if hvErr == nil {
		l.log.Info("hypervisor chosen", "emulation", emulation)
	}
	var closers []func()
	events := l.Events
	if events == nil {
		ns := newNotifySink(l.layout.NotifySocket(), l.log)
		closers = append(closers, func() { ns.Close() })
		events = ns
	}
	l.mgr = domain.New(domain.Config{
		Identity: domain.Identity{Name: l.opts.Name, Namespace: l.opts.Namespace, UID: l.opts.UID},
		DaemonConfig: domain.DaemonConfig{Socket: l.daemon.Socket(), URI: l.daemon.URI(),
			QemuLogDir: l.daemon.LogDir(), KillWithoutDaemon: l.killWithoutDaemon},
		StateConfig: domain.StateConfig{StateFile: l.stateFile(), HostUUID: l.daemon.HostUUID(),
			RestartsOffFile: l.layout.LauncherRestartsOff()},
		Layout:               l.layout,
		Log:                  l.log,
		Events:               events,
		Disks:                &disks.Preparer{Layout: l.layout, Log: l.log, MemoryLimit: l.opts.DiskMemoryLimit, Hooks: hm, ImageVolume: l.opts.ImageVolume, Root: root},
		Hooks:                hm,
		BaseFacts:            baseFacts(l.layout, emulation, !root, efiFiles(l.opts.OVMFPath), cpus, numa),
		Devices:              devinfo.PodReader(os.Environ()).Read,
		HypervisorErr:        hvErr,
		PreMigrationHooks:    l.opts.LibvirtHookServerAndClient,
		UpgradeOrdinalIfaces: l.opts.UpgradeOrdinalIfaces,
		Network: dhcp.New(dhcp.Config{CacheDir: l.layout.PrivateDir, ResolvConf: l.opts.ResolvConf,
			PasstLog: filepath.Join(l.layout.ShareDir, plan.PasstLogName)}, l.log),
		AgentIntervals: agent.Intervals{
			Sys: l.opts.AgentSysInterval, File: l.opts.AgentFileInterval, User: l.opts.AgentUserInterval,
			Version: l.opts.AgentVersionInterval, FSFreezeStatus: l.opts.FSFreezeStatusInterval,
		},
	})
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan struct{})
	go func() { l.mgr.Run(mctx); close(mdone) }()
	stop := func() {
		mcancel()
		<-mdone
		cctx, ccancel := context.WithTimeout(context.Background(), shutdownCallBound)
		defer ccancel()
		if err := l.mgr.Close(cctx); err != nil {
			l.log.Warn("stop the network phase", "reason", err.Error())
		}
		// A launcher that crashes or hands over leaves the state to the
		// next one.
		if !l.leaving {
			l.mgr.DropState()
		}
		// In reverse order of making: the notify sink outlives the manager.
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	err := l.mgr.Connected(cctx)
	ccancel()
	if err != nil {
		return mctx, stop, fatal("connect to libvirt: %w", err)
	}
	if hvErr == nil {
		// Have the daemon probe QEMU while the command server comes up and
		// the handler's first Sync is on its way (domain.WarmCapabilities).
		go func() {
			t := time.Now()
			virtType := "kvm"
			if emulation {
				virtType = "qemu"
			}
			if err := l.mgr.WarmCapabilities(mctx, facts.LibvirtArch(runtime.GOARCH), virtType); err != nil {
				l.log.Warn("probe QEMU capabilities ahead of the first Sync", "reason", err.Error())
				return
			}
			l.log.Info("QEMU capabilities ready", "took", time.Since(t).String())
		}()
	}
	return mctx, stop, nil
}

// serveCommands starts the command server on the init socket, checks it
// answers, and renames the socket to the ready one: virt-handler takes the
// launcher as ready from then on. stop is never nil and must be called
// whatever the error.
func (l *Launcher) serveCommands(ctx context.Context) (stop func(), err error) {
	lis, err := cmdserver.Listen(l.layout.InitSocket())
	if err != nil {
		return func() {}, fatal("command server: %w", err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan struct{})
	go func() {
		opts := []cmdserver.Option{cmdserver.WithPodName(os.Getenv("POD_NAME")), cmdserver.WithGuestAgent(l.mgr.GuestAgent())}
		if l.opts.VMStatsCollector {
			opts = append(opts, cmdserver.WithVMStatsCollector())
		}
		if err := cmdserver.New(l.mgr, l.log, opts...).Serve(sctx, lis); err != nil {
			l.log.Error("command server stopped", "reason", err.Error())
		}
		close(sdone)
	}()
	stop = func() {
		scancel()
		<-sdone
		if l.leaving {
			// The next launcher serves launcher-sock again (its rename
			// replaces the file); virt-handler takes a missing one for
			// a launcher gone for good.
			return
		}
		os.Remove(l.layout.InitSocket())
		os.Remove(l.layout.ReadySocket())
	}
	if err := selfCheck(ctx, l.layout.InitSocket()); err != nil {
		return stop, fatal("command server self-check: %w", err)
	}
	if err := os.Rename(l.layout.InitSocket(), l.layout.ReadySocket()); err != nil {
		return stop, fatal("mark ready: %w", err)
	}
	return stop, nil
}

// syncStandalone syncs the VMI given in the environment (vlctl run's way of
// starting a guest without a virt-handler), if there is one.
func (l *Launcher) syncStandalone(ctx context.Context) error {
	s := os.Getenv(EnvStandaloneVMI)
	if s == "" {
		return nil
	}
	v, err := vmi.Load([]byte(s), vmi.Options{})
	if err != nil {
		return fatal("%s: %w", EnvStandaloneVMI, err)
	}
	sctx, c := context.WithTimeout(ctx, 2*time.Minute)
	defer c()
	if err := l.mgr.Sync(sctx, v, domain.SyncOptions{}); err != nil {
		return fatal("%s: sync: %w", EnvStandaloneVMI, err)
	}
	return nil
}

// waitDefined waits for the first domain. end says the launcher ends
// instead, with code and err: no domain within --qemu-timeout, a signal
// (after shutting down what a Sync under way started), or ctx ending.
func (l *Launcher) waitDefined(ctx context.Context, sigs <-chan os.Signal) (code int, end bool, err error) {
	timer := time.NewTimer(l.opts.QemuTimeout)
	defer timer.Stop()
	select {
	case <-l.mgr.Defined():
		return 0, false, nil
	case <-timer.C:
		return ExitFatal, true, fatal("no domain was defined within --qemu-timeout %v", l.opts.QemuTimeout)
	case <-l.mgr.Abandoned():
		// A migration target told to clean up: KubeVirt's launcher exits
		// non-zero there too ("received early exit signal").
		return ExitFatal, true, fatal("received early exit signal: this pod is no longer the migration target, no domain will arrive")
	case sig := <-sigs:
		// A Sync may be defining the domain right now: stop new ones, wait
		// for it, and shut down whatever it started.
		l.beginTermination()
		// A Sync that outlasted that wait (disks still being prepared)
		// ends without defining anything once it gets to the define
		// (it checks the termination again there); wait for it, bounded,
		// so that neither it nor what it made outlives the launcher.
		wctx, wcancel := context.WithTimeout(ctx, shutdownCallBound)
		if err := l.mgr.Idle(wctx); err != nil {
			l.log.Warn("the Sync under way did not end", "reason", err.Error())
		}
		wcancel()
		select {
		case <-l.mgr.Defined():
			l.log.Info("signal while the first Sync defined the domain, shutting the guest down", "signal", sig.String())
			return l.finish(l.gracefulShutdown(ctx, sigs)), true, nil
		default:
		}
		l.log.Info("signal before any domain was defined, exiting", "signal", sig.String())
		return ExitOK, true, nil
	case <-ctx.Done():
		return ExitOK, true, nil
	}
}

func (l *Launcher) makeDirs() error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		// Owner-only: virt-handler is root, and every other reader (QEMU,
		// the daemons, virt-tail) runs as the launcher's own user. Existing
		// directories (pod volumes) keep their mode.
		{l.layout.ShareDir, 0o700},
		{l.layout.SocketsDir(), 0o700},
		{l.layout.PrivateDir, 0o700},
		{l.layout.EphemeralDiskDir, 0o700},
		{l.layout.ContainerDiskDir, 0o700},
		{l.layout.HotplugDiskDir, 0o700},
		{l.layout.LibvirtRunDir, 0o700},
		{filepath.Dir(l.layout.EmptyDisk("x")), 0o700},
		{l.layout.LibvirtDir(), 0o700},
		// QEMU listens there for the downwardMetrics device; virt-handler
		// (root) connects.
		{filepath.Dir(l.layout.DownwardMetricsSocket()), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fatal("create %s: %w", d.path, err)
		}
	}
	return nil
}

// libvirtdConfig places the daemons: config and domain state under the
// private dir, sockets under the libvirt run dir (in a pod
// XDG_RUNTIME_DIR=/var/run gives KubeVirt's /var/run/libvirt/virtqemud-sock).
func (l *Launcher) libvirtdConfig(root bool) libvirtd.Config {
	run := l.layout.LibvirtRunDir
	runtimeDir := run
	if filepath.Base(run) == "libvirt" {
		runtimeDir = filepath.Dir(run)
	}
	return libvirtd.Config{
		Dir:         l.layout.LibvirtDir(),
		RuntimeDir:  runtimeDir,
		CacheHome:   l.layout.PrivateDir,
		Root:        root,
		LogFilters:  l.opts.LibvirtLogFilters,
		CapsSeedDir: l.opts.QemuCapsCache,
		Virtlogd:    l.opts.Virtlogd,
		Debug:       logging.Verbosity(l.opts.Verbosity) > 5 || os.Getenv("LIBVIRT_DEBUG_LOGS") == "1",
	}
}

// selfCheck dials the init socket and calls Info and Ping, as KubeVirt's
// launcher does before it declares itself ready.
func selfCheck(ctx context.Context, sock string) error {
	ctx, cancel := context.WithTimeout(ctx, selfCheckTimeout)
	defer cancel()
	c, err := cmdclient.Dial(ctx, sock) // Dial calls Info
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Ping(ctx)
}

// beginTermination stops new Syncs and waits for the one in progress, for
// at most the grace period (shutdownCallBound when that is longer):
// one stuck in a daemon that does not answer must not hold the shutdown.
func (l *Launcher) beginTermination() {
	wait := max(time.Duration(l.opts.GracePeriodSeconds)*time.Second, shutdownCallBound)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	l.mgr.BeginTermination(ctx)
}

// gracefulShutdown: mark the domain, press the ACPI power button (again
// every few seconds: a booting guest may miss it), destroy after the grace
// period. It returns whether the domain had to be destroyed.
func (l *Launcher) gracefulShutdown(ctx context.Context, sigs <-chan os.Signal) bool {
	end := time.Now().Add(time.Duration(l.opts.GracePeriodSeconds) * time.Second)
	// Every call to the daemon is bounded (a stopped or hung daemon must
	// not hold the shutdown past its grace period).
	mctx, mcancel := context.WithDeadline(ctx, end)
	l.mgr.MarkGracefulShutdown(mctx)
	mcancel()
	grace := time.NewTimer(time.Until(end))
	defer grace.Stop()
	tick := time.NewTicker(acpiResend)
	defer tick.Stop()
	for {
		callEnd := time.Now().Add(shutdownCallBound)
		if end.Before(callEnd) {
			callEnd = end
		}
		sctx, scancel := context.WithDeadline(ctx, callEnd)
		running, err := l.mgr.ShutdownForTermination(sctx)
		scancel()
		if err != nil {
			l.log.Warn("ACPI shutdown", "reason", err.Error())
		}
		if !running && err == nil {
			select {
			case <-l.mgr.Stopped():
			default:
				// Defined but never started: nothing to wait for.
				return false
			}
		}
		select {
		case <-l.mgr.Stopped():
			return false
		case <-tick.C:
		case <-sigs:
		case <-grace.C:
			l.log.Info("grace period over, destroying the domain")
			dctx, dcancel := context.WithTimeout(context.Background(), shutdownCallBound)
			err := l.mgr.Destroy(dctx)
			dcancel()
			wait := destroyWait
			if err != nil {
				l.log.Error("destroy domain", "reason", err.Error())
				wait = 0 // the daemon did not do it: no event will come
			}
			select {
			case <-l.mgr.Stopped():
			case <-time.After(wait):
				l.log.Error("QEMU still running after destroy: killing it ourselves")
				if err := l.killQemu(); err != nil {
					l.log.Error("kill QEMU", "reason", err.Error())
				}
			}
			return true
		}
	}
}

// killQemu is the watchdog's last resort when the daemon does not destroy
// the domain (stopped, hung): SIGKILL to this pod's QEMU (qemuPid).
func (l *Launcher) killQemu() error {
	_, err := l.sigkillQemu()
	return err
}

// sigkillQemu sends SIGKILL to this pod's QEMU (qemuPid) and returns its pid.
func (l *Launcher) sigkillQemu() (int, error) {
	pid, err := l.qemuPid()
	if err != nil {
		return 0, err
	}
	l.log.Warn("killing QEMU", "pid", pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill QEMU (pid %d): %w", pid, err)
	}
	return pid, nil
}

// killWithoutDaemon is the domain manager's Kill when the daemon does not
// destroy the domain: QEMU is killed by its pid (killQemuWait), and the
// daemon, which does not answer, is replaced by a new one.
func (l *Launcher) killWithoutDaemon(ctx context.Context) error {
	err := l.killQemuWait(ctx)
	if rerr := l.daemon.Replace(); rerr != nil {
		l.log.Error("replace the libvirt daemon", "reason", rerr.Error())
	}
	return err
}

// killQemuWait is killQemu returning once QEMU has ended (its parent, the
// monitor, reaps it), or with ctx's end.
func (l *Launcher) killQemuWait(ctx context.Context) error {
	pid, err := l.sigkillQemu()
	if err != nil {
		return err
	}
	for {
		if st, err := procfs.ReadStat("/proc", pid); err != nil || st.State == 'Z' {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("QEMU (pid %d) still runs after SIGKILL: %w", pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// qemuPid finds this pod's QEMU by the pid file the daemon wrote in our
// own run directory, checked to be a qemu-system process of this pod
// (libvirt's QEMU is a child of our parent, the monitor).
func (l *Launcher) qemuPid() (int, error) {
	name := domain.DomainName(l.opts.Namespace, l.opts.Name)
	cfg := l.libvirtdConfig(false)
	var errs []error
	for _, f := range []string{
		filepath.Join(cfg.RuntimeDir, "libvirt", "qemu", "run", name+".pid"), // session daemon
		filepath.Join(cfg.RuntimeDir, "libvirt", "qemu", name+".pid"),        // system daemon
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			return 0, fmt.Errorf("pid file %s: %q is not a pid", f, b)
		}
		st, err := procfs.ReadStat("/proc", pid)
		if err != nil {
			return 0, fmt.Errorf("QEMU pid %d from %s: %w", pid, f, err)
		}
		if !strings.HasPrefix(st.Comm, "qemu-") || !procfs.IsAncestor("/proc", os.Getppid(), pid) {
			return 0, fmt.Errorf("pid %d from %s is %q, not a QEMU of this pod: left alone", pid, f, st.Comm)
		}
		return pid, nil
	}
	return 0, fmt.Errorf("no QEMU pid file: %w", errors.Join(errs...))
}

// finish sends the final "domain gone" event and picks the exit code.
func (l *Launcher) finish(destroyed bool) int {
	l.shutdownHooks()
	code := ExitOK
	st, reason := l.mgr.StopState()
	switch {
	case st == libvirt.DomainCrashed:
		code = ExitQEMUDied
	case st == libvirt.DomainShutoff && !destroyed:
		switch libvirt.DomainShutoffReason(reason) {
		case libvirt.DomainShutoffCrashed, libvirt.DomainShutoffFailed, libvirt.DomainShutoffDaemon:
			code = ExitQEMUDied
		}
	}
	l.log.Info("QEMU is gone", "state", st.String(), "reason", reason, "exitCode", code)

	ctx, cancel := context.WithTimeout(context.Background(), finalEventWait)
	defer cancel()
	// With a handler connected it deletes the domain itself (and we send the
	// gone event then); without one nobody will, so undefine right away.
	if _, err := os.Stat(l.layout.NotifySocket()); err == nil {
		select {
		case <-l.mgr.GoneSent():
			return code
		case <-ctx.Done():
			l.log.Warn("no final event within the wait, undefining the domain ourselves")
		}
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ucancel()
	if err := l.mgr.Undefine(uctx); err != nil {
		l.log.Warn("undefine domain", "reason", err.Error())
	}
	select {
	case <-l.mgr.GoneSent():
	case <-uctx.Done():
		l.log.Warn("final event not sent")
	}
	return code
}

func (l *Launcher) stopDaemons() {
	if l.daemon == nil || l.leaving {
		// Leaving: the daemon ends with us (its parent-death signal),
		// and the monitor stops it for the next launcher. Stopped here,
		// one that did not end in time would be killed and its domain
		// directories removed, QEMU's monitor socket with them.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), daemonStopWait)
	defer cancel()
	if err := l.daemon.Stop(ctx); err != nil {
		l.log.Warn("stop libvirt daemons", "reason", err.Error())
	}
}
