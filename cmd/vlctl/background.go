package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/manifest"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
)

// vlctl run -d: the VM is held by a supervisor, vlctl's own binary run
// again with the same arguments (and --background DIR), in a session of
// its own, so that neither the end of this vlctl nor the terminal's hang-up
// reaches it. It runs the VM exactly as a foreground vlctl run does (its
// record, vlctl stop, its clean-up), with its output in the background
// run's log (runrecord.Background). This vlctl waits until the guest runs
// and prints the VM's name, or prints the error and leaves nothing.

// The supervisor's descriptors besides stdin (/dev/null) and its stdout and
// stderr (the log).
const (
	// readyFD is the write end of a pipe: "ready\n" once the guest runs.
	readyFD = 3
	// statusFD is the terminal's stderr, where the supervisor's lines go
	// too until the guest runs.
	statusFD = 4
	// lockFD holds the background run's lock for the supervisor's life.
	lockFD = 5
	// exeFD is vlctl's binary, opened once and executed from there.
	exeFD = 6
)

const readyLine = "ready\n"

// exitStatus ends vlctl with that status and no line of its own: what
// went wrong was said already.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// runDetached starts the supervisor of a background run and waits for its
// guest to run. Errors the manifest or flags give come out here, before
// anything is made, as a foreground run gives them.
func runDetached(cmd *cobra.Command, cfg standalone.Config) error {
	if cfg.MigrateFrom != "" {
		return errors.New("-d: a run taking a guest over (--migrate-from) runs in the foreground for now")
	}
	ns, name, err := standalone.Check(cfg)
	if err != nil {
		return runError(err)
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("-d: vlctl's own binary: %w", err)
	}
	defer exe.Close()
	b, lock, log, err := runrecord.NewBackground(cfg.RecordDir, ns, name)
	if err != nil {
		return err
	}
	started := false
	defer func() {
		lock.Close()
		log.Close()
		if !started {
			os.RemoveAll(b.Dir)
		}
	}()
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer stdin.Close()
	if slices.Contains(runFiles(cfg.File, cfg.Files), manifest.Stdin) {
		// The manifest, read into a sealed file (stdinManifest): no
		// terminal.
		stdin = os.Stdin
	}
	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ready.Close()
	sup := &exec.Cmd{
		Path: "/proc/self/fd/" + strconv.Itoa(exeFD),
		// The same arguments: the supervisor parses them as this vlctl
		// did; --background makes it the supervisor.
		Args:   append([]string{"vlctl"}, append(os.Args[1:], "--background", b.Dir)...),
		Env:    supervisorEnv(),
		Stdin:  stdin,
		Stdout: log,
		Stderr: log,
		// The order is the descriptors' (readyFD, statusFD, lockFD, exeFD).
		ExtraFiles:  []*os.File{readyW, os.Stderr, lock, exe},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if sup.Dir, err = os.Getwd(); err != nil {
		readyW.Close()
		return err
	}
	err = sup.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("-d: start the supervisor: %w", err)
	}
	started = true
	if !cfg.Quiet {
		fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: %s/%s starting in the background (supervisor pid %d; its log: vlctl logs --run %s/%s)\n", ns, name, sup.Process.Pid, ns, name)
	}
	if waitReady(sup, ready) {
		sup.Process.Release()
		fmt.Fprintf(cmd.OutOrStdout(), "%s/%s\n", ns, name)
		return nil
	}
	// The supervisor said why and removed what it made.
	if err := sup.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return exitStatus(ee.ExitCode())
		}
		return fmt.Errorf("-d: supervisor: %w", err)
	}
	return exitStatus(1)
}

// waitReady waits for the supervisor's word that the guest runs (true) or
// the end of the pipe. Ctrl-C meanwhile stops the VM as it would a
// foreground run: the first gracefully, the second at once.
func waitReady(sup *exec.Cmd, ready *os.File) bool {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(ready).ReadString('\n')
		line <- s
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for n := 0; ; {
		select {
		case s := <-line:
			return s == readyLine
		case <-sigs:
			sig := syscall.SIGTERM
			if n++; n > 1 {
				sig = killSignal
			}
			sup.Process.Signal(sig)
		}
	}
}

// supervisorEnv is the supervisor's whole environment: nothing of the
// caller's but what a foreground run reads (HOME and DOCKER_CONFIG, where
// registry credentials are; the proxy settings imports and pulls honour;
// SUDO_UID, whose files a hostDisk may use).
func supervisorEnv() []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	for _, k := range []string{"HOME", "DOCKER_CONFIG"} {
		if v := os.Getenv(k); filepath.IsAbs(v) {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if id, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil && id > 0 {
		env = append(env, "SUDO_UID="+strconv.Itoa(id))
	}
	return env
}

// supervise runs the VM as the supervisor of the background run in dir:
// as a foreground run, with its lines in the log (and on the starting
// vlctl's terminal until the guest runs) and no console on stdout.
func supervise(ctx context.Context, cfg standalone.Config, dir string) error {
	for _, fd := range []int{readyFD, statusFD, lockFD} {
		// Nothing the run starts inherits them.
		unix.CloseOnExec(fd)
	}
	unix.Close(exeFD)
	ready := os.NewFile(readyFD, "ready")
	lock := os.NewFile(lockFD, "lock")
	defer lock.Close()
	// Not a terminal's: no hang-up is meant for it.
	signal.Ignore(syscall.SIGHUP)
	status := &handoff{log: os.Stderr, term: os.NewFile(statusFD, "status")}
	cfg.Status, cfg.Console = status, io.Discard
	if err := runrecord.UpdateBackground(dir, func(s *runrecord.BackgroundState) {
		s.PID, s.PIDStart, _ = runrecord.Self()
	}); err != nil {
		return err
	}
	var running atomic.Bool
	var once sync.Once
	cfg.Started = func(standalone.Started) {
		once.Do(func() {
			if err := runrecord.UpdateBackground(dir, func(s *runrecord.BackgroundState) { s.Started = time.Now().UTC() }); err != nil {
				fmt.Fprintf(status, "vlctl: warning: %v\n", err)
			}
			running.Store(true)
			io.WriteString(ready, readyLine)
			ready.Close()
			status.detach()
		})
	}
	err := runError(standalone.Run(ctx, cfg))
	if !running.Load() {
		// The guest never ran: said where it is read, nothing kept.
		if err == nil {
			err = errors.New("the run ended before its guest ran")
		}
		fmt.Fprintln(status, "vlctl:", err)
		status.detach()
		ready.Close()
		os.RemoveAll(dir)
		return exitStatus(1)
	}
	if uerr := runrecord.UpdateBackground(dir, func(s *runrecord.BackgroundState) {
		s.Ended = time.Now().UTC()
		if err != nil {
			s.Error = err.Error()
		}
	}); uerr != nil {
		err = errors.Join(err, uerr)
	}
	if err == nil {
		fmt.Fprintln(status, "vlctl: the run ended")
	}
	return err
}

// handoff writes to the log and, until detached, to the terminal the run
// was started from (a terminal gone meanwhile is no error).
type handoff struct {
	mu   sync.Mutex
	log  io.Writer
	term *os.File
}

func (h *handoff) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term != nil {
		h.term.Write(p)
	}
	return h.log.Write(p)
}

func (h *handoff) detach() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.term != nil {
		h.term.Close()
		h.term = nil
	}
}

// backgroundLog prints the log of the background run query names (vlctl
// logs --run), and with follow what is added until the run ends.
func backgroundLog(cmd *cobra.Command, n *nameFlags, query string, follow bool) error {
	if os.Geteuid() != 0 {
		return errors.New("logs needs root, as vlctl run does: run it with sudo")
	}
	runs, lerr := runrecord.ListBackground(n.recordDir)
	b, err := runrecord.MatchBackground(runs, query, n.namespace)
	if err == nil && b == nil {
		err = fmt.Errorf("no background run of %q (vlctl run -d makes one)", query)
	}
	if err != nil {
		return errors.Join(err, lerr)
	}
	f, err := runrecord.OpenBackgroundLog(b)
	if err != nil {
		return fmt.Errorf("%s: %w", b.FullName(), err)
	}
	defer f.Close()
	for {
		// Asked first: what the run wrote before it ended is copied.
		running := follow && backgroundRunning(n.recordDir, b)
		if _, err := io.Copy(cmd.OutOrStdout(), f); err != nil {
			return fmt.Errorf("%s: %w", b.FullName(), err)
		}
		if !running {
			return nil
		}
		select {
		case <-cmd.Context().Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// backgroundRunning says whether b's supervisor still runs.
func backgroundRunning(recordDir string, b *runrecord.Background) bool {
	runs, _ := runrecord.ListBackground(recordDir)
	now, _ := runrecord.MatchBackground(runs, b.FullName(), "")
	return now != nil && now.Running
}
