package pod

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startIn starts a shell that names arg on its command line (what Under
// matches) and runs script; the test kills it at the end if it still runs.
func startIn(t *testing.T, arg, script string) *Process {
	t.Helper()
	p, err := Start(exec.Command("/bin/sh", "-c", script, "sh", arg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.Done()
	})
	return p
}

// waitIgnoring waits until pid ignores sig (its SigIgn mask in
// /proc/<pid>/status): a shell just started has not run its trap yet, and
// a signal sent before would end it (seen under make test's load).
func waitIgnoring(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
				if err != nil {
					t.Fatalf("pid %d: SigIgn %q: %v", pid, hex, err)
				}
				if mask&(1<<(uint(sig)-1)) != 0 {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d does not ignore %v after 10 s", pid, sig)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUnder: a process naming a path inside the directory, or the
// directory itself, is found; one naming a sibling whose name starts with
// the directory's is not. Below finds them all under this process.
func TestUnder(t *testing.T) {
	dir := t.TempDir()
	inside := startIn(t, dir+"/x", "sleep 30; :").Cmd.Process.Pid
	whole := startIn(t, dir, "sleep 30; :").Cmd.Process.Pid
	sibling := startIn(t, dir+"1/x", "sleep 30; :").Cmd.Process.Pid
	got := Under(dir)()
	if !slices.Contains(got, inside) || !slices.Contains(got, whole) {
		t.Errorf("Under(%s) = %v, want %d and %d", dir, got, inside, whole)
	}
	if slices.Contains(got, sibling) {
		t.Errorf("Under(%s) = %v names the sibling's %d", dir, got, sibling)
	}
	below := Below(os.Getpid())()
	for _, pid := range []int{inside, whole, sibling} {
		if !slices.Contains(below, pid) {
			t.Errorf("%d: not below this process (below: %v)", pid, below)
		}
	}
}

// TestEndProcesses: what the selector finds ends, by the signal when it
// obeys and by SIGKILL after the grace when it does not (and Killing hears
// of it); what it does not find keeps running.
func TestEndProcesses(t *testing.T) {
	dir := t.TempDir()
	polite := startIn(t, dir, "sleep 30; :")
	// The shell ignores SIGTERM; its sleep gets SIGKILL with it.
	stubborn := startIn(t, dir+"/s", `trap "" TERM; sleep 30; :`)
	waitIgnoring(t, stubborn.Cmd.Process.Pid, syscall.SIGTERM)
	bystander := startIn(t, t.TempDir(), "sleep 30; :")
	var killed []int
	t0 := time.Now()
	err := EndProcesses(context.Background(), Under(dir), EndOptions{Signal: syscall.SIGTERM, Grace: time.Second,
		Killing: func(left []int) { killed = append(killed, left...) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Process{polite, stubborn} {
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Errorf("pid %d still runs after EndProcesses", p.Cmd.Process.Pid)
		}
	}
	if ws, ok := polite.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGTERM {
		t.Errorf("the polite shell ended by %v, want SIGTERM", polite.Cmd.ProcessState)
	}
	if ws, ok := stubborn.Cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the stubborn shell ended by %v, want SIGKILL", stubborn.Cmd.ProcessState)
	}
	if !slices.Contains(killed, stubborn.Cmd.Process.Pid) || slices.Contains(killed, polite.Cmd.Process.Pid) {
		t.Errorf("Killing heard %v, want the stubborn shell %d and not the polite %d", killed, stubborn.Cmd.Process.Pid, polite.Cmd.Process.Pid)
	}
	if d := time.Since(t0); d < time.Second {
		t.Errorf("SIGKILL after %v, before the 1 s grace", d)
	}
	if bystander.Exited() {
		t.Errorf("a process the selector does not find was ended")
	}
}

// TestEndProcessesForce: a closed Force cuts the grace short.
func TestEndProcessesForce(t *testing.T) {
	dir := t.TempDir()
	p := startIn(t, dir, `trap "" TERM; sleep 30; :`)
	waitIgnoring(t, p.Cmd.Process.Pid, syscall.SIGTERM)
	force := make(chan struct{})
	close(force)
	t0 := time.Now()
	if err := EndProcesses(context.Background(), Under(dir), EndOptions{Grace: time.Minute, Force: force}); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("ended after %v despite Force", d)
	}
}

// TestWaitFor: WaitFor answers when the condition holds, with an
// *ExitedError when the process ends first, and with ctx's error.
func TestWaitFor(t *testing.T) {
	p := startIn(t, t.TempDir(), "sleep 30; :")
	n := 0
	if err := p.WaitFor(context.Background(), time.Millisecond, func(time.Time) bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Errorf("WaitFor = %v after %d calls, want nil after 3", err, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.WaitFor(ctx, time.Millisecond, func(time.Time) bool { return false }); err != context.DeadlineExceeded {
		t.Errorf("WaitFor past its deadline = %v, want %v", err, context.DeadlineExceeded)
	}
	short := startIn(t, t.TempDir(), "exit 3")
	err := short.WaitReady(context.Background(), "/nonexistent/launcher-sock")
	var exited *ExitedError
	if !errors.As(err, &exited) || exited.Err == nil {
		t.Fatalf("WaitReady on a process that exits = %v, want an ExitedError with its status", err)
	}
	if ee, ok := exited.Err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("ExitedError.Err = %v, want exit status 3", exited.Err)
	}
	if short.EndedAt().IsZero() {
		t.Errorf("EndedAt is zero after the end")
	}
}
