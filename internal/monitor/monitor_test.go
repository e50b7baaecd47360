package monitor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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

	"github.com/virtlauncher/virtlauncher/internal/logging"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// The tests run the real monitor binary (cmd/virt-launcher-monitor) over a
// small fake launcher (testdata/fakelauncher), both built once in TestMain.
var (
	monitorBin string
	fakeBin    string
)

func TestMain(m *testing.M) {
	dir, err := testenv.Binaries("monitor-test-bin-", "./cmd/virt-launcher-monitor", "./internal/monitor/testdata/fakelauncher")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	monitorBin = filepath.Join(dir, "virt-launcher-monitor")
	fakeBin = filepath.Join(dir, "fakelauncher")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run is one monitor process under test.
type run struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *testenv.SyncBuffer
	dir    string
	done   chan struct{}
	code   int
}

// start runs the monitor with args and extra environment; the launcher is
// the fake one unless env sets VIRT_LAUNCHER_BIN itself.
func start(t *testing.T, args []string, env ...string) *run {
	t.Helper()
	r := &run{t: t, stderr: &testenv.SyncBuffer{}, dir: t.TempDir(), done: make(chan struct{})}
	r.cmd = exec.Command(monitorBin, args...)
	r.cmd.Env = append(os.Environ(), EnvLauncherBin+"="+fakeBin,
		"FAKE_READY_FILE="+r.path("ready"), "FAKE_ARGS_FILE="+r.path("args"))
	r.cmd.Env = append(r.cmd.Env, env...)
	r.cmd.Stderr = r.stderr
	r.cmd.Stdout = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := r.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			r.code = 0
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
		default:
			r.code = -100
		}
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *run) path(name string) string { return filepath.Join(r.dir, name) }

// wait returns the monitor's exit status, failing after timeout.
func (r *run) wait(timeout time.Duration) int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.t.Fatalf("monitor did not exit within %v; log:\n%s", timeout, r.stderr.String())
	}
	r.checkLog()
	return r.code
}

// waitFile waits for a file the fake launcher creates.
func (r *run) waitFile(name string, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(r.path(name)); err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s did not appear within %v; log:\n%s", name, timeout, r.stderr.String())
		}
		select {
		case <-r.done:
			r.t.Fatalf("monitor exited (%d) before %s appeared; log:\n%s", r.code, name, r.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkLog requires every line the monitor wrote to be a KubeVirt log line.
func (r *run) checkLog() []map[string]any {
	r.t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.stderr.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			r.t.Errorf("monitor wrote a line that is not JSON: %q", sc.Text())
			continue
		}
		for _, k := range []string{"component", "level", "msg", "pos", "timestamp"} {
			if _, ok := m[k]; !ok {
				r.t.Errorf("log line lacks %q: %s", k, sc.Text())
			}
		}
		if m["component"] != "virt-launcher-monitor" {
			r.t.Errorf("component = %v", m["component"])
		}
		out = append(out, m)
	}
	return out
}

func TestParseArgs(t *testing.T) {
	noEnv := func(string) string { return "" }
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, c Config) {
			if c.ContainerDiskDir != DefaultContainerDiskDir || c.Verbosity != 2 || c.KeepAfterFailure ||
				c.QemuStopTimeout != 10*time.Second || c.IstioQuit || len(c.LauncherArgs) != 0 ||
				c.Restarts != DefaultRestarts || c.RestartWindow != DefaultRestartWindow {
				t.Errorf("bad defaults: %+v", c)
			}
		}},
		{name: "kubevirt command line", args: []string{
			"--qemu-timeout", "262s", "--name", "vm1", "--uid", "u-1", "--namespace", "ns",
			"--kubevirt-share-dir", "/s", "--ephemeral-disk-dir", "/e", "--container-disk-dir", "/c",
			"--grace-period-seconds", "45", "--hook-sidecars", "0", "--ovmf-path", "/o",
			"--keep-after-failure", "--allow-emulation", "-v", "5", "--private-dir=/p",
		}, check: func(t *testing.T, c Config) {
			want := []string{"--qemu-timeout", "262s", "--name", "vm1", "--uid", "u-1", "--namespace", "ns",
				"--kubevirt-share-dir", "/s", "--ephemeral-disk-dir", "/e", "--container-disk-dir", "/c",
				"--grace-period-seconds", "45", "--hook-sidecars", "0", "--ovmf-path", "/o",
				"--allow-emulation", "-v", "5", "--private-dir=/p"}
			if !slices.Equal(c.LauncherArgs, want) {
				t.Errorf("launcher args\n got %q\nwant %q", c.LauncherArgs, want)
			}
			if !c.KeepAfterFailure || c.UID != "u-1" || c.Verbosity != 5 || c.ContainerDiskDir != "/c" ||
				c.ShareDir != "/s" || c.PrivateDir != "/p" {
				t.Errorf("parsed %+v", c)
			}
		}},
		{name: "single dash and equals", args: []string{"-keep-after-failure=false", "--v=7", "-uid=x"}, check: func(t *testing.T, c Config) {
			if c.KeepAfterFailure || c.Verbosity != 7 || c.UID != "x" || !slices.Equal(c.LauncherArgs, []string{"--v=7", "-uid=x"}) {
				t.Errorf("parsed %+v", c)
			}
		}},
		{name: "after -- untouched", args: []string{"--", "--keep-after-failure"}, check: func(t *testing.T, c Config) {
			if c.KeepAfterFailure || !slices.Equal(c.LauncherArgs, []string{"--", "--keep-after-failure"}) {
				t.Errorf("parsed %+v", c)
			}
		}},
		{name: "help", args: []string{"--help"}, check: func(t *testing.T, c Config) {
			if !c.Help {
				t.Error("help not set")
			}
		}},
		{name: "env knobs", env: map[string]string{EnvIstioQuit: "1", EnvQemuStopTimeout: "250ms", EnvLauncherBin: "/x/launcher"},
			check: func(t *testing.T, c Config) {
				if !c.IstioQuit || c.QemuStopTimeout != 250*time.Millisecond || c.LauncherPath != "/x/launcher" {
					t.Errorf("parsed %+v", c)
				}
			}},
		{name: "bad verbosity", args: []string{"-v", "loud"}, wantErr: "-v"},
		{name: "missing value", args: []string{"--uid"}, wantErr: "--uid needs a value"},
		{name: "bad bool", args: []string{"--keep-after-failure=maybe"}, wantErr: "keep-after-failure"},
		{name: "bad timeout", env: map[string]string{EnvQemuStopTimeout: "soon"}, wantErr: EnvQemuStopTimeout},
		{name: "bad istio", env: map[string]string{EnvIstioQuit: "perhaps"}, wantErr: EnvIstioQuit},
		{name: "restarts off", env: map[string]string{EnvRestarts: "0", EnvRestartWindow: "1h"}, check: func(t *testing.T, c Config) {
			if c.Restarts != 0 || c.RestartWindow != time.Hour {
				t.Errorf("parsed %+v", c)
			}
		}},
		{name: "bad restarts", env: map[string]string{EnvRestarts: "-1"}, wantErr: EnvRestarts},
		{name: "bad restart window", env: map[string]string{EnvRestartWindow: "0s"}, wantErr: EnvRestartWindow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getenv := noEnv
			if c.env != nil {
				getenv = func(k string) string { return c.env[k] }
			}
			cfg, err := ParseArgs(c.args, getenv)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
}

func TestExitStatus(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		want int
	}{
		{"zero", []string{"FAKE_EXIT=0"}, 0},
		{"three", []string{"FAKE_EXIT=3"}, 3},
		{"panic status", []string{"FAKE_EXIT=2"}, 2},
		{"killed by SIGKILL", []string{"FAKE_KILL_SELF=9"}, 128 + 9},
		{"killed by SIGHUP", []string{"FAKE_KILL_SELF=1"}, 128 + 1},
		{"launcher missing", []string{EnvLauncherBin + "=/nonexistent/virt-launcher"}, 1},
		{"launcher not executable", []string{EnvLauncherBin + "=/etc/hostname"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := start(t, nil, c.env...)
			if got := r.wait(20 * time.Second); got != c.want {
				t.Errorf("exit status %d, want %d; log:\n%s", got, c.want, r.stderr.String())
			}
		})
	}
}

func TestArgsPassThrough(t *testing.T) {
	args := []string{"--keep-after-failure", "--uid", "abc", "-v", "4", "--unknown-flag", "x",
		"--container-disk-dir", "/nonexistent/cd", "--bool-flag", "positional", "--keep-after-failure=true"}
	r := start(t, args, "FAKE_EXIT=0")
	if code := r.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d; log:\n%s", code, r.stderr.String())
	}
	b, err := os.ReadFile(r.path("args"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--uid", "abc", "-v", "4", "--unknown-flag", "x", "--container-disk-dir", "/nonexistent/cd", "--bool-flag", "positional"}
	if got := strings.Split(string(b), "\n"); !slices.Equal(got, want) {
		t.Errorf("launcher got %q, want %q", got, want)
	}
}

// TestLauncherNextToMonitor checks the standalone fallback: without
// VIRT_LAUNCHER_BIN and without /usr/bin/virt-launcher, the monitor runs
// the virt-launcher installed beside it.
func TestLauncherNextToMonitor(t *testing.T) {
	if _, err := os.Stat(DefaultLauncherPath); err == nil {
		t.Skipf("%s exists here; the fallback cannot be observed", DefaultLauncherPath)
	}
	dir := t.TempDir()
	for src, dst := range map[string]string{monitorBin: "virt-launcher-monitor", fakeBin: "virt-launcher"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "virt-launcher-monitor"))
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, EnvLauncherBin+"=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "FAKE_EXIT=6")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 6 {
		t.Fatalf("exit %v, want the fake launcher's 6; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), filepath.Join(dir, "virt-launcher")) {
		t.Errorf("log does not name the launcher beside the monitor:\n%s", out)
	}
}

func TestHelp(t *testing.T) {
	out, err := exec.Command(monitorBin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, f := range []string{"--container-disk-dir", "--keep-after-failure", "--uid", "-v", EnvLauncherBin, EnvIstioQuit, EnvQemuStopTimeout, EnvRestarts, EnvRestartWindow, logging.EnvVerbosity} {
		if !strings.Contains(string(out), f) {
			t.Errorf("--help does not mention %s", f)
		}
	}
}

func TestSignalForwarding(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			r := start(t, nil, "FAKE_WAIT_TERM=1", "FAKE_EXIT=7")
			r.waitFile("ready", 10*time.Second)
			if err := r.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := r.wait(10 * time.Second); code != 7 {
				t.Errorf("exit %d, want the launcher's 7; log:\n%s", code, r.stderr.String())
			}
		})
	}
}

// TestSignalIsTerm checks that the launcher receives SIGTERM whichever
// signal the monitor got.
func TestSignalIsTerm(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			term := filepath.Join(dir, "term")
			r := start(t, nil, "FAKE_WAIT_TERM=1", "FAKE_TERM_FILE="+term)
			r.waitFile("ready", 10*time.Second)
			_ = r.cmd.Process.Signal(sig)
			if code := r.wait(10 * time.Second); code != 0 {
				t.Fatalf("exit %d; log:\n%s", code, r.stderr.String())
			}
			b, err := os.ReadFile(term)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != syscall.SIGTERM.String() {
				t.Errorf("launcher received %q, want %q", b, syscall.SIGTERM.String())
			}
		})
	}
}

// TestNonRoot runs the monitor as an unprivileged user, as vlctl does: the
// ambient capability cannot be granted and the launcher starts without it.
func TestNonRoot(t *testing.T) {
	testenv.Root(t, "switches to an unprivileged user")
	dir, err := os.MkdirTemp("", "monitor-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(monitorBin)
	cmd.Env = append(os.Environ(), EnvLauncherBin+"="+fakeBin, "FAKE_EXIT=5", "FAKE_ARGS_FILE="+filepath.Join(dir, "args"),
		"FAKE_STATUS_FILE="+filepath.Join(dir, "status"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("exit %v, want status 5; output:\n%s", err, out)
	}
	st, err := os.Stat(filepath.Join(dir, "args"))
	if err != nil {
		t.Fatalf("the launcher did not run: %v", err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 65534 {
		t.Errorf("launcher ran as uid %d, want 65534", uid)
	}
	if amb := capAmb(t, filepath.Join(dir, "status")); amb != 0 {
		t.Errorf("unprivileged launcher has ambient capabilities %#x", amb)
	}
}

// capAmb reads the CapAmb mask from a copy of /proc/<pid>/status.
func capAmb(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapAmb:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapAmb line")
	return 0
}

// TestAmbientNetBindService checks that a root monitor gives the launcher
// CAP_NET_BIND_SERVICE as an ambient capability, as KubeVirt's does.
func TestAmbientNetBindService(t *testing.T) {
	testenv.Root(t, "grants an ambient capability")
	status := filepath.Join(t.TempDir(), "status")
	r := start(t, nil, "FAKE_STATUS_FILE="+status)
	if code := r.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d; log:\n%s", code, r.stderr.String())
	}
	if amb := capAmb(t, status); amb != 1<<CapNetBindService {
		t.Errorf("launcher's ambient capabilities %#x, want %#x (CAP_NET_BIND_SERVICE)", amb, 1<<CapNetBindService)
	}
}

// TestLauncherTermOnMonitorDeath checks the launcher's parent-death signal:
// if the monitor is killed outright, the launcher still gets SIGTERM and can
// shut its guest down.
func TestLauncherTermOnMonitorDeath(t *testing.T) {
	// Become a subreaper for the duration, so the orphaned launcher comes
	// to this test and is reaped here rather than left to the machine's init.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatal(errno)
	}
	defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 0, 0)
	term := filepath.Join(t.TempDir(), "term")
	r := start(t, nil, "FAKE_WAIT_TERM=1", "FAKE_TERM_FILE="+term)
	r.waitFile("ready", 10*time.Second)
	kids, _ := childrenOf(t, r.cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("monitor children %v, want just the launcher", kids)
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	var ws syscall.WaitStatus
	done := make(chan error, 1)
	go func() { _, err := syscall.Wait4(kids[0], &ws, 0, nil); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(kids[0], syscall.SIGKILL)
		t.Fatal("launcher still running 10 s after the monitor was killed")
	}
	if b, err := os.ReadFile(term); err != nil || string(b) != syscall.SIGTERM.String() {
		t.Errorf("launcher received %q (%v), want %q", b, err, syscall.SIGTERM.String())
	}
}

// childrenOf lists the children of pid and how many of them are zombies.
func childrenOf(t *testing.T, pid int) (all, zombies []int) {
	t.Helper()
	procs, err := procfs.List("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PPID == pid {
			all = append(all, p.PID)
			if p.State == 'Z' {
				zombies = append(zombies, p.PID)
			}
		}
	}
	return all, zombies
}

func TestReapOrphans(t *testing.T) {
	const n = 1000
	r := start(t, nil, "FAKE_ORPHANS="+strconv.Itoa(n), "FAKE_WAIT_TERM=1")
	begin := time.Now()
	r.waitFile("ready", 60*time.Second)
	spawned := time.Since(begin)
	// Only the launcher may remain a child of the monitor: every orphan was
	// re-parented to it (it is a subreaper) and must have been reaped.
	var all, zombies []int
	deadline := time.Now().Add(20 * time.Second)
	for {
		all, zombies = childrenOf(t, r.cmd.Process.Pid)
		if len(all) == 1 && len(zombies) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the monitor still has %d children, %d of them zombies", len(all), len(zombies))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d orphans spawned in %v; all reaped %v after the spawner finished", n, spawned.Round(time.Millisecond), time.Since(begin.Add(spawned)).Round(time.Millisecond))
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(10 * time.Second); code != 0 {
		t.Errorf("exit %d; log:\n%s", code, r.stderr.String())
	}
}

// fakeQemu copies src into a fresh directory as qemu-system-x86_64, so that
// the process started from it is named like QEMU.
func fakeQemu(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "qemu-system-x86_64")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func alive(pid int) bool {
	p, err := procfs.ReadStat("/proc", pid)
	return err == nil && p.State != 'Z'
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, n)
	}
	return pids
}

// startUnrelated starts a process of the test's own (never a descendant of
// any monitor) and stops it at the end.
func startUnrelated(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(path, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c
}

func TestQemuLeftBehind(t *testing.T) {
	sleepQemu := fakeQemu(t, "/bin/sleep")
	unrelated := startUnrelated(t, sleepQemu, "300")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	// The launcher orphans a QEMU-named sleep and a plain sleep, then exits.
	r := start(t, nil, "FAKE_ORPHAN_CMDS="+sleepQemu+" 300;/bin/sleep 300", "FAKE_PID_FILE="+pidFile, "FAKE_EXIT=0")
	code := r.wait(30 * time.Second)
	if code != 0 {
		t.Errorf("exit %d, want 0 (QEMU obeyed SIGTERM); log:\n%s", code, r.stderr.String())
	}
	pids := readPids(t, pidFile)
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("descendant %d survived the monitor", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if !alive(unrelated.Process.Pid) {
		t.Errorf("the unrelated qemu-system-x86_64 (pid %d) was ended by the monitor", unrelated.Process.Pid)
	}
	if !strings.Contains(r.stderr.String(), "terminating QEMU left behind") {
		t.Errorf("no log line about the QEMU; log:\n%s", r.stderr.String())
	}
}

func TestStubbornQemuIsKilled(t *testing.T) {
	stubborn := fakeQemu(t, fakeBin)
	unrelated := startUnrelated(t, fakeQemu(t, "/bin/sleep"), "300")
	pidFile := filepath.Join(t.TempDir(), "pids")
	r := start(t, nil, "FAKE_ORPHAN_CMDS="+stubborn, "FAKE_ORPHAN_MODE=stubborn", "FAKE_PID_FILE="+pidFile,
		"FAKE_EXIT=0", EnvQemuStopTimeout+"=500ms")
	begin := time.Now()
	code := r.wait(30 * time.Second)
	if code != 1 {
		t.Errorf("exit %d, want 1 (QEMU survived SIGTERM); log:\n%s", code, r.stderr.String())
	}
	if d := time.Since(begin); d < 500*time.Millisecond {
		t.Errorf("monitor exited after %v, before the SIGTERM grace of 500ms", d)
	}
	for _, pid := range readPids(t, pidFile) {
		if alive(pid) {
			t.Errorf("stubborn QEMU %d survived", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if !alive(unrelated.Process.Pid) {
		t.Error("the unrelated qemu-system-x86_64 was ended by the monitor")
	}
}

func TestKeepAfterFailure(t *testing.T) {
	r := start(t, []string{"--keep-after-failure"}, "FAKE_EXIT=3")
	// Wait for the launcher to be gone, then make sure the monitor stays.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.stderr.String(), "keeping the container after failure") {
		if time.Now().After(deadline) {
			t.Fatalf("no keep-after-failure log line; log:\n%s", r.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-r.done:
		t.Fatalf("monitor exited (%d) despite --keep-after-failure", r.code)
	case <-time.After(time.Second):
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(5 * time.Second); code != 3 {
		t.Errorf("exit %d, want 3", code)
	}

	// A zero status ends the monitor at once even with the flag.
	r = start(t, []string{"--keep-after-failure"}, "FAKE_EXIT=0")
	if code := r.wait(10 * time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
}

func TestCleanupFiles(t *testing.T) {
	base := t.TempDir()
	cd := filepath.Join(base, "container-disks")
	share := filepath.Join(base, "share")
	priv := filepath.Join(base, "private")
	qlog := filepath.Join(priv, "libvirt", "qemu", "log")
	for _, d := range []string{cd, share, qlog} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(cd, "disk_0.sock"):      "",
		filepath.Join(cd, "disk_1.sock"):      "",
		filepath.Join(cd, "disk_0.img"):       "image",
		filepath.Join(qlog, "ns_vm1.log"):     "qemu line one\nqemu \"line\" two\n",
		filepath.Join(share, "passt.log"):     "passt says hi\n",
		filepath.Join(priv, "not-a-log.sock"): "",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, []string{"--container-disk-dir", cd, "--kubevirt-share-dir", share, "--private-dir", priv}, "FAKE_EXIT=0")
	if code := r.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d; log:\n%s", code, r.stderr.String())
	}
	for p := range files {
		_, err := os.Stat(p)
		removed := errors.Is(err, os.ErrNotExist)
		if want := filepath.Dir(p) == cd && strings.HasSuffix(p, ".sock"); removed != want {
			t.Errorf("%s: removed=%v, want %v", p, removed, want)
		}
	}
	relayed := map[string]string{}
	for _, m := range r.checkLog() {
		if sc, ok := m["subcomponent"].(string); ok {
			relayed[m["msg"].(string)] = sc
		}
	}
	for msg, sc := range map[string]string{"qemu line one": "qemu", `qemu "line" two`: "qemu", "passt says hi": "passt"} {
		if relayed[msg] != sc {
			t.Errorf("line %q relayed with subcomponent %q, want %q (relayed: %v)", msg, relayed[msg], sc, relayed)
		}
	}
}

// TestCleanupQemuSockets: QEMU's sockets in <private-dir>/<uid>/ are
// removed once the tree is stopped; other files there stay.
func TestCleanupQemuSockets(t *testing.T) {
	priv := filepath.Join(t.TempDir(), "private")
	vmiDir := filepath.Join(priv, "uid-1")
	if err := os.MkdirAll(vmiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var socks []string
	for _, n := range []string{"virt-serial0", "virt-vnc", "virt-usbredir-0"} {
		s := filepath.Join(vmiDir, n)
		l, err := net.Listen("unix", s)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close()
		socks = append(socks, s)
	}
	keep := []string{filepath.Join(vmiDir, "virt-serial0-log"), filepath.Join(priv, "virt-not-in-a-vmi-dir")}
	for _, f := range keep {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, []string{"--private-dir", priv}, "FAKE_EXIT=0")
	if code := r.wait(20 * time.Second); code != 0 {
		t.Fatalf("exit %d; log:\n%s", code, r.stderr.String())
	}
	for _, s := range socks {
		if _, err := os.Lstat(s); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s not removed (%v)", s, err)
		}
	}
	for _, f := range keep {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s removed: %v", f, err)
		}
	}
}

func TestQuitIstio(t *testing.T) {
	var quit sync.WaitGroup
	quit.Add(1)
	quitSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && req.URL.Path == "/quitquitquit" {
			quit.Done()
		}
	}))
	defer quitSrv.Close()
	for _, server := range []string{"envoy", "nginx"} {
		t.Run(server, func(t *testing.T) {
			ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				w.Header().Set("Server", server)
				_, _ = io.WriteString(w, "ok")
			}))
			defer ready.Close()
			var buf bytes.Buffer
			quitIstio(logging.New(&buf, "t", 2), port(t, ready.URL), port(t, quitSrv.URL))
			asked := strings.Contains(buf.String(), "asked istio-proxy to quit")
			if asked != (server == "envoy") {
				t.Errorf("server %s: asked=%v; log %s", server, asked, buf.String())
			}
		})
	}
	quit.Wait() // exactly one POST, from the envoy case
	// Nothing listening: returns quietly.
	var buf bytes.Buffer
	quitIstio(logging.New(&buf, "t", 2), 1, 1)
	if buf.Len() != 0 {
		t.Errorf("unexpected log: %s", buf.String())
	}
}

func port(t *testing.T, raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMonitorRSS prints the monitor's resident memory while it supervises an
// idle launcher (a number to watch, not an assertion; target <= 3 MiB).
func TestMonitorRSS(t *testing.T) {
	r := start(t, nil, "FAKE_WAIT_TERM=1")
	r.waitFile("ready", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, l := range strings.Split(string(status), "\n") {
		for _, k := range []string{"VmRSS:", "RssAnon:", "RssFile:", "VmHWM:", "Threads:"} {
			if strings.HasPrefix(l, k) {
				fields = append(fields, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	if len(fields) == 0 {
		t.Fatal("no VmRSS in /proc status")
	}
	t.Logf("virt-launcher-monitor memory: %s", strings.Join(fields, ", "))
	fmt.Printf("virt-launcher-monitor memory: %s\n", strings.Join(fields, ", "))
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	r.wait(10 * time.Second)
}
