package standalone_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// startVlctl starts vlctl with args; the returned channel yields its end.
func startVlctl(t *testing.T, args ...string) (*exec.Cmd, *testenv.SyncBuffer, *testenv.SyncBuffer, chan error) {
	t.Helper()
	return startCmd(t, exec.Command(filepath.Join(binDir, "vlctl"), args...))
}

// startCmd starts cmd (vlctl, set up by the caller) with its output
// captured, killed at the end of the test if it still runs; the returned
// channel yields its end.
func startCmd(t *testing.T, cmd *exec.Cmd) (*exec.Cmd, *testenv.SyncBuffer, *testenv.SyncBuffer, chan error) {
	t.Helper()
	var stdout, stderr testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})
	return cmd, &stdout, &stderr, exited
}

// waitFor waits until cond holds, failing the test after limit or when
// vlctl ends first.
func waitFor(t *testing.T, what string, limit time.Duration, exited chan error, cond func() bool) {
	t.Helper()
	deadline := time.After(limit)
	for !cond() {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("vlctl ended while waiting for %s: %v", what, err)
		case <-deadline:
			t.Fatalf("no %s within %s", what, limit)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestVlctlRunStrategyAlways: a VM with runStrategy Always is started
// again after its guest powers off, as KubeVirt's VM controller does, until
// Ctrl-C; then vlctl ends with status 0 and leaves nothing.
func TestVlctlRunStrategyAlways(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	if err := os.WriteFile(filepath.Join(e.dir, "hd.img"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	file := e.write(t, "always", e.doc("Always", "a"))
	cmd, stdout, stderr, exited := startVlctl(t, e.run(
		"--volume", "claim1="+filepath.Join(e.dir, "pvc.img")+",size=8Mi", "--volume", "dv1="+filepath.Join(e.dir, "dv.img"), file)...)
	waitFor(t, "a second boot", 4*time.Minute, exited, func() bool {
		return strings.Count(stdout.String(), testguest.MarkerBooted+" ") >= 2
	})
	if !strings.Contains(stderr.String(), "run strategy: starting the guest again") {
		t.Errorf("vlctl did not say it starts the guest again")
	}
	// The second boot sees what the first wrote.
	waitFor(t, "the second boot's user-data", 2*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), "VL-PREV p-hdnew VLDATA-p-hdnew-a")
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, "vlctl after SIGINT", cmd, exited, 2*time.Minute); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	e.checkNothingLeft(t)
}

// TestVlctlRunSecondInterrupt: a second Ctrl-C while a guest that ignores
// the power button is being shut down destroys it at once instead of
// waiting out its grace period.
func TestVlctlRunSecondInterrupt(t *testing.T) {
	needRoot(t)
	t.Parallel()
	const grace = 120
	manifest := testGuestText(t, "twice", "--no-network")
	args := testguest.DefaultCmdline + " " + testguest.OptNoDHCP + " " + testguest.OptNoACPI
	manifest = strings.Replace(manifest, `kernelArgs: "`+testguest.DefaultCmdline, `kernelArgs: "`+args, 1)
	manifest = strings.Replace(manifest, "terminationGracePeriodSeconds: 10", fmt.Sprintf("terminationGracePeriodSeconds: %d", grace), 1)
	if !strings.Contains(manifest, testguest.OptNoACPI) || !strings.Contains(manifest, fmt.Sprintf("GracePeriodSeconds: %d", grace)) {
		t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
	}
	file := filepath.Join(t.TempDir(), "twice.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	root := workRoot(t)
	cmd, stdout, stderrBuf, exited := startVlctl(t, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
	waitFor(t, "the guest", 3*time.Minute, exited, func() bool { return strings.Contains(stdout.String(), testguest.MarkerReady) })
	cmd.Process.Signal(os.Interrupt)
	waitFor(t, "the graceful shutdown", time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerACPIIgnored)
	})
	second := time.Now()
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("vlctl did not end within a minute of the second SIGINT (grace period %d s)", grace)
	}
	t.Logf("vlctl ended %s after the second SIGINT", time.Since(second).Round(time.Millisecond))
	if !strings.Contains(stderrBuf.String(), "interrupted again, destroying the guest") {
		t.Errorf("vlctl did not say it destroys the guest")
	}
	if strings.Contains(stderrBuf.String(), "grace period over") {
		t.Errorf("vlctl waited for the grace period")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	checkNothingLeft(t, root)
}

// TestRunForcedWhileStarting: a second interrupt while QEMU is starting
// (Config.Force closed right after the cancellation) ends the run without
// waiting for the launcher's graceful end, and still leaves nothing: no
// work dir and no process, QEMU included.
func TestRunForcedWhileStarting(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := guestManifest(t, "forced", goodVMI,
		"spec:\n", "spec:\n  terminationGracePeriodSeconds: 120\n",
		"        container:\n", "        kernelArgs: \""+testguest.DefaultCmdline+" "+testguest.OptNoACPI+"\"\n        container:\n")
	root := workRoot(t)
	var status testenv.SyncBuffer
	force := make(chan struct{})
	var cfg standalone.Config
	cfg.File, cfg.Emulation, cfg.WorkRoot, cfg.BinDir = file, true, root, binDir
	cfg.Console, cfg.Status, cfg.Force = &status, &status, force
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- standalone.Run(ctx, cfg) }()
	waitQEMU(t, root, done)
	cancel()
	close(force)
	forced := time.Now()
	select {
	case err := <-done:
		t.Logf("run ended %s after the forced stop: %v", time.Since(forced).Round(time.Millisecond), err)
	case <-time.After(time.Minute):
		t.Fatal("run did not end within a minute of the forced stop (grace period 120 s)")
	}
	checkNothingLeft(t, root)
	if t.Failed() {
		t.Logf("status:\n%s", status.String())
	}
}

// TestVlctlRunNotRoot: run by an ordinary user, vlctl run says it needs
// root, in one line, and makes nothing.
func TestVlctlRunNotRoot(t *testing.T) {
	needRoot(t)
	uid, gid, err := pod.LookupUser(launchertest.TestUser)
	testenv.Need(t, "user virtlauncher", err)
	root := workRoot(t)
	cmd := exec.Command(filepath.Join(binDir, "vlctl"), "run", "--workdir", root, "--record-dir", workRoot(t), "/nonexistent.yaml")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	msg := strings.TrimSuffix(string(out), "\n")
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "vlctl run needs root") || !strings.Contains(msg, "sudo") {
		t.Errorf("output %q", msg)
	}
	checkNothingLeft(t, root)
}
