package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one cluster daemon, started by us, its output in logs/NAME.log.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
}

// cleanEnv is the whole environment of every daemon: nothing of the
// caller's leaks in (proxies, GOFLAGS, KUBECONFIG...).
func cleanEnv(bin string) []string {
	return []string{
		"PATH=" + bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root",
		"LANG=C.UTF-8",
	}
}

// start runs exe with args in the namespaces of node 1 and the control
// plane (startIn).
func (c *Cluster) start(name, exe string, args ...string) (*proc, error) {
	return c.startIn(c.nodes[0].initPid, name, exe, args...)
}

// startIn runs exe with args, its output in logs/NAME.log, in the PID and
// mount namespaces of initPid (0: the machine's). The daemon gets SIGKILL
// if the process that started it dies (Pdeathsig), so a killed `make e2e`
// does not leave its API server running; what such a run still leaves
// (shims, pods, mounts) is found by cleanLeftovers.
func (c *Cluster) startIn(initPid int, name, exe string, args ...string) (*proc, error) {
	logPath := c.Log(name)
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer lf.Close()
	if initPid != 0 {
		// Into the cluster's PID and mount namespaces (startInit).
		args = append([]string{"--target", strconv.Itoa(initPid), "--pid", "--mount", "--", exe}, args...)
		exe = "/usr/bin/nsenter"
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = cleanEnv(c.cfg.Bin)
	cmd.Dir = c.stateDir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	c.logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	if err := c.recordState(); err != nil {
		return nil, err
	}
	return p, nil
}

// exited says whether p has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the daemon's process group (nsenter and the
// daemon it forked), then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// waitFor polls check until it succeeds, ctx ends, or one of the
// cluster's daemons exits (then the error names it and the end of its log).
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		for _, p := range c.procs {
			if done, err := p.exited(); done {
				return fmt.Errorf("waiting for %s: %s exited (%v); end of its log:\n%s", what, p.name, err, c.logTail(p.name, 15))
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: not ready after %s: %w", what, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logTail is the last n lines of a daemon's log.
func (c *Cluster) logTail(name string, n int) string {
	data, err := os.ReadFile(c.Log(name))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// Run runs a short command to completion with a deadline, env as its
// whole environment, and stdin (if any); it returns the command's stdout,
// and an error carries its stderr. The one command runner of the suite.
func Run(ctx context.Context, timeout time.Duration, env []string, stdin, exe string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = env
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		what := filepath.Base(exe) + " " + strings.Join(args, " ")
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return stdout.String(), fmt.Errorf("%s: no answer in %s: %s", what, timeout, strings.TrimSpace(stderr.String()))
		case ctx.Err() != nil:
			return stdout.String(), fmt.Errorf("%s: interrupted", what)
		}
		return stdout.String(), fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// run is Run as the cluster's own short commands need it: 10 s, the
// daemons' clean environment, no input.
func (c *Cluster) run(ctx context.Context, exe string, args ...string) (string, error) {
	return Run(ctx, 10*time.Second, cleanEnv(c.cfg.Bin), "", exe, args...)
}

// startInit starts a node's own PID and mount namespaces (node 1's also
// hold the control plane), with e2e/pause as their PID 1, logged as name,
// and returns that PID 1's host pid; the node's daemons are started in
// them (startIn). Why: hostPID pods (virt-handler)
// read the host through /proc/1 (/proc/1/ns/mnt, /proc/1/root), and the
// machine's PID 1 may not be ours to read; in these namespaces it is, and
// their mount table is the cluster's own: the machine's stays as it was,
// and everything mounted in them goes when PID 1 does. unshare's
// --kill-child ends that PID 1 (and with it every process in the
// namespace, pods included) when unshare dies, and unshare dies with us
// (Pdeathsig).
func (c *Cluster) startInit(ctx context.Context, name string) (int, error) {
	// From the machine's namespaces, not another node's.
	p, err := c.startIn(0, name, "/usr/bin/unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc",
		"--propagation", "private", filepath.Join(c.cfg.Bin, "pause"))
	if err != nil {
		return 0, err
	}
	var initPid int
	err = c.waitFor(ctx, "the PID 1 of "+name, 10*time.Second, func(context.Context) error {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.cmd.Process.Pid, p.cmd.Process.Pid))
		if err != nil {
			return err
		}
		f := strings.Fields(string(data))
		if len(f) != 1 {
			return fmt.Errorf("unshare has %d children", len(f))
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			return err
		}
		if !strings.HasSuffix(exeOf(pid), "/pause") {
			return fmt.Errorf("pid %d is not pause yet", pid)
		}
		initPid = pid
		return nil
	})
	return initPid, err
}

// inNamespace runs a short command in the mount namespace of initPid.
func (c *Cluster) inNamespace(ctx context.Context, initPid int, exe string, args ...string) error {
	_, err := c.run(ctx, "/usr/bin/nsenter",
		append([]string{"--target", strconv.Itoa(initPid), "--mount", "--", exe}, args...)...)
	return err
}
