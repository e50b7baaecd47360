// Package monitor is virt-launcher-monitor: PID 1 of a launcher pod, or the
// parent of a standalone launcher. It starts the launcher, reaps every
// zombie of its process tree, forwards termination signals, starts a new
// launcher when one dies by accident while its guest runs (the new one
// takes the guest back), and once the launcher has ended for good cleans
// up after it (a QEMU left behind, container-disk
// sockets) and exits with the launcher's status (kubevirt-wire.md 5.2, 5.6).
//
// It imports nothing beyond the standard library and internal/logging, so
// that it stays at a few MiB of memory per pod.
package monitor

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// CapNetBindService is CAP_NET_BIND_SERVICE (linux/capability.h), the one
// capability a launcher pod keeps: the launcher's DHCP server binds ports 67
// and 547. The monitor hands it on to the launcher as an ambient capability.
const CapNetBindService = 10

// signalHandOver (SIGUSR2) is forwarded to the launcher as is: it asks it
// to leave its running guest to a new launcher (exit 3), which the
// monitor then starts from the same path.
const signalHandOver = syscall.SIGUSR2

const (
	prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER
	istioReadyPort      = 15021
	istioQuitPort       = 15020
	// othersStopTimeout is how long the rest of the tree (libvirt daemons a
	// crashed launcher left behind) gets between SIGTERM and SIGKILL.
	othersStopTimeout = 3 * time.Second
)

// Run starts the launcher and supervises it until it exits. A launcher that
// died by accident while its guest ran (decideRestart) is started again,
// after its own libvirt daemon is stopped, and takes the guest back;
// otherwise Run cleans up and returns the process exit status: the launcher's own (128+n when it was
// killed by signal n), or 1 if the launcher could not be started or a QEMU of
// this tree survived SIGTERM. Cancelling ctx acts like SIGTERM.
func Run(ctx context.Context, log *slog.Logger, c Config) int {
	if c.UID != "" {
		log = log.With(slog.String("uid", c.UID))
	}
	self := os.Getpid()
	if self != 1 {
		// Orphans of the launcher's tree (daemonised libvirtd, a QEMU whose
		// daemon died) are re-parented to us rather than to the machine's
		// init, so that we reap them and can find them.
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
			log.Warn("cannot become child subreaper; orphans go to init", "reason", errno)
		}
	}

	noCoreDumps(log)

	sigs := make(chan os.Signal, 128)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, signalHandOver)
	defer signal.Stop(sigs)

	pid, err := startLauncher(c)
	if err != nil {
		log.Error("failed to start virt-launcher", "path", c.LauncherPath, "reason", err)
		code := 1
		cleanup(log, c, self, &code)
		return code
	}
	log.Info("virt-launcher started", "pid", pid, "path", c.LauncherPath)

	// restarts and handOvers are the times of each kind (decideRestart's budgets),
	// started every new launcher's, hand-overs included.
	var restarts, handOvers []time.Time
	started := 0
	var code int
	// termTaken: a termination request was taken from the queue with the
	// launcher's death (termPending), never to be seen again.
	var termTaken bool
	for {
		ws, terminating := supervise(ctx, log, sigs, pid)
		// A termination request that came with the launcher's death is
		// one too: the pod is ending, no launcher is started for it.
		termTaken = termPending(sigs)
		terminating = termTaken || ctx.Err() != nil || terminating
		code = exitCode(ws)
		log.Info("virt-launcher exited", "status", code)
		d := decideRestart(launcherEnd{
			Status:       ws,
			Terminating:  terminating,
			QemuAlive:    qemuAlive(log, self),
			Unresponsive: unresponsive(c.ShareDir),
			OffForVMI:    restartsOffForVMI(c.PrivateDir),
			Restarts:     restarts,
			HandOvers:    handOvers,
			Now:          time.Now(),
			Budget:       c.Restarts,
			Window:       c.RestartWindow,
		})
		if !d.Restart {
			log.Info("not restarting virt-launcher; cleaning up", "reason", d.Reason)
			break
		}
		log.Warn("restarting virt-launcher; the new one takes the running guest back", "reason", d.Reason)
		// A hand-over was asked for: it does not spend the budget that
		// bounds accidents.
		now := time.Now()
		if ws.Exited() && ws.ExitStatus() == launcherExitHandOver {
			handOvers = append(handOvers, now)
		} else {
			restarts = append(restarts, now)
		}
		started++
		if err := writeRestarts(c.PrivateDir, RestartRecord{Count: started, Last: now, Reason: d.Reason}); err != nil {
			log.Warn("cannot record the restart", "reason", err)
		}
		stopDaemons(log, self)
		if pid, err = startLauncher(c); err != nil {
			log.Error("failed to restart virt-launcher", "path", c.LauncherPath, "reason", err)
			code = 1
			break
		}
		log.Info("virt-launcher restarted", "pid", pid, "restarts", started)
	}

	cleanup(log, c, self, &code)

	if c.KeepAfterFailure && code != 0 && !termTaken {
		log.Info("keeping the container after failure (--keep-after-failure); waiting for SIGTERM", "status", code)
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGCHLD {
					reap(0)
					continue
				}
				return code
			case <-ctx.Done():
				return code
			}
		}
	}
	return code
}

// supervise reaps zombies and forwards termination requests to the
// launcher (pid) until it has ended, and returns its wait status and
// whether a termination was asked for. Cancelling ctx counts as a SIGTERM.
func supervise(ctx context.Context, log *slog.Logger, sigs <-chan os.Signal, pid int) (ws syscall.WaitStatus, terminating bool) {
	done := ctx.Done()
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				if ws, ok := reap(pid); ok {
					return ws, terminating
				}
				continue
			}
			if s == signalHandOver {
				log.Info("asking virt-launcher to hand over to a new launcher", "signal", s.String())
				if err := syscall.Kill(pid, signalHandOver); err != nil {
					log.Warn("failed to signal virt-launcher", "reason", err)
				}
				continue
			}
			terminating = true
			log.Info("forwarding signal to virt-launcher as SIGTERM", "signal", s.String())
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				log.Warn("failed to signal virt-launcher", "reason", err)
			}
		case <-done:
			done = nil
			terminating = true
			log.Info("context cancelled; sending SIGTERM to virt-launcher")
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}

// termPending takes the signals already queued and reports whether one of
// them asks for termination (it is not forwarded: the launcher is gone).
// Zombies of a queued SIGCHLD are reaped.
func termPending(sigs <-chan os.Signal) bool {
	term := false
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				reap(0)
				continue
			}
			if s == signalHandOver {
				continue // the launcher that was to hand over is gone anyway
			}
			term = true
		default:
			return term
		}
	}
}

// startLauncher runs the launcher with our stdio and environment. It gets
// CAP_NET_BIND_SERVICE as an ambient capability when we can give it
// (KubeVirt's launcher binds low ports for passt and slirp); when we
// cannot (no such capability in our permitted set) it starts without.
// The launcher gets its own process group, so that a terminal's Ctrl-C
// reaches it only through us, as one SIGTERM, and SIGTERM if we die.
func startLauncher(c Config) (int, error) {
	argv := append([]string{c.LauncherPath}, c.LauncherArgs...)
	attr := &syscall.ProcAttr{
		Env:   launcherEnv(os.Environ()),
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Setpgid:     true,
			Pdeathsig:   syscall.SIGTERM,
			AmbientCaps: []uintptr{CapNetBindService},
		},
	}
	pid, err := syscall.ForkExec(c.LauncherPath, argv, attr)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
		attr.Sys.AmbientCaps = nil
		pid, err = syscall.ForkExec(c.LauncherPath, argv, attr)
	}
	return pid, err
}

// launcherEnv is the launcher's environment: ours, with GOTRACEBACK=crash
// unless it is set. A Go panic or fatal runtime error then ends the
// launcher with SIGABRT (after the same stack dump) instead of exit status
// 2, which is also a fatal start-up error's: the monitor can tell a crash,
// which it restarts, from a launcher that gave up, which it does not.
func launcherEnv(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOTRACEBACK=") {
			return env
		}
	}
	return append(env[:len(env):len(env)], "GOTRACEBACK=crash")
}

// noCoreDumps sets our core file size limit, which the launcher inherits,
// to 0: a launcher crashing with SIGABRT (launcherEnv) must not write a
// core file of its memory into the pod, or the node's crash collector.
// QEMU's limit is libvirt's (max_core = 0).
func noCoreDumps(log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &lim); err != nil || lim.Cur == 0 {
		return
	}
	lim.Cur = 0
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &lim); err != nil {
		log.Warn("cannot turn core dumps off; a crashing launcher may write one", "reason", err)
	}
}

// reap collects every zombie child. It returns the launcher's wait status
// and true once launcher has been collected.
func reap(launcher int) (status syscall.WaitStatus, found bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return status, found
		}
		if launcher > 0 && pid == launcher {
			status, found = ws, true
		}
	}
}

// exitCode is what a shell would report: the exit status, or 128+signal.
func exitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 1
}

// cleanup does what KubeVirt's monitor does after the launcher is gone,
// in its order: relay QEMU's and passt's logs, end this tree's QEMU,
// remove container-disk sockets (and, unlike KubeVirt, whose pod
// directories vanish with the pod, QEMU's dead sockets), stop istio. It then stops any other
// process of the tree and reaps it. code becomes 1 if a QEMU had to be
// killed.
func cleanup(log *slog.Logger, c Config, self int, code *int) {
	dumpLogs(log, c, self == 1)
	if !stopTree(log, self, c.QemuStopTimeout, true) {
		log.Error("QEMU survived SIGTERM and was killed", "timeout", c.QemuStopTimeout.String())
		*code = 1
	}
	removeSockets(log, c.ContainerDiskDir)
	removeQemuSockets(log, c.PrivateDir)
	if c.IstioQuit {
		quitIstio(log, istioReadyPort, istioQuitPort)
	}
	stopTree(log, self, othersStopTimeout, false)
	reap(0)
	// Only now, with nothing left to serve them: a launcher that was
	// killed could not remove its command sockets, and virt-handler
	// takes a missing launcher-sock for a launcher gone at once, where a
	// dead one costs it its stale-socket timeout. A launcher restarted
	// after a crash never gets here: its socket stays in place.
	removeLauncherSockets(log, c.ShareDir)
}

// removeLauncherSockets removes the launcher's command sockets in its
// socket directory under shareDir (sockets only, never another file).
func removeLauncherSockets(log *slog.Logger, shareDir string) {
	if shareDir == "" {
		return
	}
	for _, name := range []string{"launcher-sock", "launcher-init-sock"} {
		p := filepath.Join(shareDir, "sockets", name)
		if fi, err := os.Lstat(p); err != nil || fi.Mode().Type() != os.ModeSocket {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("failed to remove the launcher's socket", "path", p, "reason", err)
		}
	}
}

// stopTree sends SIGTERM to our living descendants (only QEMUs when qemu is
// true, only the others otherwise), waits up to timeout for them to go
// while reaping, and SIGKILLs what is left. It returns false if something
// had to be killed.
func stopTree(log *slog.Logger, self int, timeout time.Duration, qemu bool) bool {
	what := "process"
	if qemu {
		what = "QEMU"
	}
	return stopMatching(log, self, timeout, what+" left behind", func(p procfs.Stat) bool { return isQemu(procRoot, p) == qemu })
}

// procRoot is where the monitor reads processes.
const procRoot = "/proc"

// stopMatching is stopTree for the descendants that match, named what in
// the log. /proc is scanned once; the wait then watches only the processes
// signalled, so that it allocates next to nothing.
func stopMatching(log *slog.Logger, self int, timeout time.Duration, what string, match func(procfs.Stat) bool) bool {
	left, err := descendants(procRoot, self, match)
	if err != nil {
		log.Error("cannot list processes", "reason", err)
		return true
	}
	if len(left) == 0 {
		return true
	}
	for _, p := range left {
		log.Info("terminating "+what, "pid", p.PID, "comm", p.Comm)
		if err := signalIfStill(procRoot, self, p, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			log.Warn("failed to send SIGTERM", "pid", p.PID, "reason", err)
		}
	}
	if left = waitGone(procRoot, left, timeout); len(left) == 0 {
		return true
	}
	for _, p := range left {
		log.Warn(what+" did not exit after SIGTERM; killing it", "pid", p.PID, "comm", p.Comm)
		_ = signalIfStill(procRoot, self, p, syscall.SIGKILL)
	}
	// SIGKILL cannot be refused; wait briefly so they are reaped before we exit.
	waitGone(procRoot, left, 2*time.Second)
	return false
}

// waitGone reaps and polls until none of ps is alive (a pid that is gone,
// a zombie, or reused by a later process counts as gone) or timeout
// passes, and returns those still alive.
func waitGone(procRoot string, ps []procfs.Stat, timeout time.Duration) []procfs.Stat {
	deadline := time.Now().Add(timeout)
	for {
		reap(0)
		alive := ps[:0]
		for _, p := range ps {
			if now, err := procfs.ReadStat(procRoot, p.PID); err == nil && now.State != 'Z' && now.StartTime == p.StartTime {
				alive = append(alive, p)
			}
		}
		ps = alive
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeQemuSockets removes the unix sockets QEMU listened on in the VMI's
// private directory (<private-dir>/<uid>/virt-serial0, virt-vnc,
// virt-usbredir-N). QEMU unlinks none of them when it is destroyed or
// killed, and once the tree is stopped nothing serves them any more: a
// console client would find a dead socket. Only sockets are removed, never
// a file or directory of another kind.
func removeQemuSockets(log *slog.Logger, privateDir string) {
	if privateDir == "" {
		return
	}
	socks, err := filepath.Glob(filepath.Join(privateDir, "*", "virt-*"))
	if err != nil {
		return
	}
	for _, s := range socks {
		fi, err := os.Lstat(s)
		if err != nil || fi.Mode().Type() != os.ModeSocket {
			continue
		}
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("failed to remove QEMU socket", "path", s, "reason", err)
		}
	}
}

// removeSockets removes dir/*.sock, which makes the container-disk
// containers of the pod exit.
func removeSockets(log *slog.Logger, dir string) {
	socks, err := filepath.Glob(filepath.Join(dir, "*.sock"))
	if err != nil {
		return
	}
	for _, s := range socks {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("failed to remove container-disk socket", "path", s, "reason", err)
		}
	}
}
