package standalone_test

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// TestVlctlRunLauncherKilled: the launcher of a `vlctl run` guest killed
// with SIGKILL. The run's monitor starts a new launcher, which takes the
// guest over; vlctl run carries on (its connection to the launcher comes
// back by itself, checked to be of this run), the verbs by name work, the
// same QEMU runs, and Ctrl-C still ends the run cleanly.
func TestVlctlRunLauncherKilled(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	cmd, _, stderr, exited := startStayingGuest(t, e, "lk", false)
	of := func(match func(procfs.Stat) bool) int {
		procs, err := procfs.Under("/proc", e.root)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.State != 'Z' && match(p) {
				return p.PID
			}
		}
		return 0
	}
	isLauncher := func(p procfs.Stat) bool { return p.Comm == "virt-launcher" }
	launcher := of(isLauncher)
	qemu := of(func(p procfs.Stat) bool { return strings.HasPrefix(p.Comm, "qemu") })
	if launcher == 0 || qemu == 0 {
		t.Fatalf("no launcher (%d) or QEMU (%d) among the run's processes", launcher, qemu)
	}
	if err := syscall.Kill(launcher, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pid := of(isLauncher); pid != 0 && pid != launcher {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("vlctl run ended after its launcher was killed (%v):\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new launcher 30 s after the kill:\n%s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The new launcher serves within a second or so; a verb run before
	// that finds the socket refusing, as any client of a launcher that is
	// starting does.
	for _, verb := range []string{"pause", "unpause"} {
		for try := 0; ; try++ {
			code, _, out := vlctl(t, time.Minute, verb, "keep", "--record-dir", e.records)
			if code == 0 {
				break
			}
			if try == 20 {
				t.Fatalf("vlctl %s keep after the launcher's restart: exit %d: %s\nrun:\n%s", verb, code, out, stderr.String())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if now := of(func(p procfs.Stat) bool { return strings.HasPrefix(p.Comm, "qemu") }); now != qemu {
		t.Fatalf("QEMU is pid %d, was %d", now, qemu)
	}
	// vlctl ps counts the restart (the RESTARTS column, after UPTIME).
	code, out, errOut := vlctl(t, time.Minute, "ps", "--record-dir", e.records)
	if row := regexp.MustCompile(`(?m)^keep\s+\S+\s+Running\s+\S+\s+1\s`); code != 0 || !row.MatchString(out) {
		t.Errorf("vlctl ps (exit %d) shows no restart of keep's launcher:\n%s%s", code, out, errOut)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("vlctl run still runs 2 minutes after Ctrl-C:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("vlctl run exited %d after Ctrl-C, want 0:\n%s", code, stderr.String())
	}
	e.checkNothingLeft(t)
}
