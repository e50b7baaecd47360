package monitor

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launcher"
)

// TestDecideRestart is the monitor's choice, from what it knows when the
// launcher has ended, between starting a new launcher (which takes the
// running guest back) and cleaning up as KubeVirt's monitor does.
func TestDecideRestart(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	// Wait statuses as wait4(2) gives them: the low 7 bits are the
	// signal, the exit status sits above them.
	signaled := func(s syscall.Signal) syscall.WaitStatus { return syscall.WaitStatus(s) }
	exited := func(code int) syscall.WaitStatus { return syscall.WaitStatus(code << 8) }
	ago := func(ds ...time.Duration) []time.Time {
		var ts []time.Time
		for _, d := range ds {
			ts = append(ts, now.Add(-d))
		}
		return ts
	}
	// accident is a launcher killed while its guest runs, nothing else
	// against a restart.
	accident := func(change func(*launcherEnd)) launcherEnd {
		e := launcherEnd{Status: signaled(syscall.SIGKILL), QemuAlive: true, Now: now, Budget: DefaultRestarts, Window: DefaultRestartWindow}
		if change != nil {
			change(&e)
		}
		return e
	}
	for _, tc := range []struct {
		name    string
		end     launcherEnd
		restart bool
		reason  string // a part of the logged reason
	}{
		{name: "killed with SIGKILL while its guest runs: restarted", end: accident(nil), restart: true, reason: "killed"},
		{name: "a crash the runtime turned into SIGABRT: restarted", end: accident(func(e *launcherEnd) { e.Status = signaled(syscall.SIGABRT) }), restart: true, reason: "aborted"},
		{name: "a segfault: restarted", end: accident(func(e *launcherEnd) { e.Status = signaled(syscall.SIGSEGV) }), restart: true, reason: "segmentation"},
		{name: "killed, four restarts in the window: the fifth is allowed", end: accident(func(e *launcherEnd) { e.Restarts = ago(time.Minute, 2*time.Minute, 3*time.Minute, 4*time.Minute) }), restart: true, reason: "restart 5 of at most 5"},
		{name: "killed, five restarts in the window: the budget is spent", end: accident(func(e *launcherEnd) {
			e.Restarts = ago(time.Minute, 2*time.Minute, 3*time.Minute, 4*time.Minute, 5*time.Minute)
		}), reason: "budget spent"},
		{name: "killed, restarts long ago do not count", end: accident(func(e *launcherEnd) {
			e.Restarts = ago(11*time.Minute, 12*time.Minute, 13*time.Minute, 14*time.Minute, 15*time.Minute, time.Minute)
		}), restart: true, reason: "restart 2 of"},
		{name: "restarts switched off: cleaned up as KubeVirt does", end: accident(func(e *launcherEnd) { e.Budget = 0 }), reason: "switched off"},
		{name: "handed over (exit 3): restarted", end: accident(func(e *launcherEnd) { e.Status = exited(3) }), restart: true, reason: "handed over"},
		{name: "handed over with restarts switched off: restarted, it was asked for", end: accident(func(e *launcherEnd) { e.Status = exited(3); e.Budget = 0 }), restart: true, reason: "handed over"},
		{name: "handed over with the budget spent: restarted, it was asked for", end: accident(func(e *launcherEnd) {
			e.Status = exited(3)
			e.Restarts = ago(time.Minute, 2*time.Minute, 3*time.Minute, 4*time.Minute, 5*time.Minute)
		}), restart: true, reason: "handed over"},
		{name: "ten hand-overs in the window: the eleventh is refused", end: accident(func(e *launcherEnd) {
			e.Status = exited(3)
			for i := range MaxHandOvers {
				e.HandOvers = append(e.HandOvers, now.Add(-time.Duration(i+1)*time.Second))
			}
		}), reason: "hand-overs spent"},
		{name: "exited 3 with no QEMU left: nothing to hand over, cleaned up", end: accident(func(e *launcherEnd) { e.Status = exited(3); e.QemuAlive = false }), reason: "nothing to take over"},
		{name: "handed over while the pod terminates: its end is the pod's", end: accident(func(e *launcherEnd) { e.Status = exited(3); e.Terminating = true }), reason: "termination was asked"},
		{name: "the VMI asks for no restarts: cleaned up as KubeVirt does", end: accident(func(e *launcherEnd) { e.OffForVMI = true }), reason: "asks for none"},
		{name: "killed while the pod terminates: its end is the pod's", end: accident(func(e *launcherEnd) { e.Terminating = true }), reason: "termination was asked"},
		{name: "killed with no QEMU left: nothing to keep", end: accident(func(e *launcherEnd) { e.QemuAlive = false }), reason: "no QEMU"},
		{name: "killed after virt-handler marked it unresponsive: the VMI fails anyway", end: accident(func(e *launcherEnd) { e.Unresponsive = true }), reason: "unresponsive"},
		{name: "exited 0, the domain gone: cleaned up", end: accident(func(e *launcherEnd) { e.Status = exited(0) }), reason: "exited normally"},
		{name: "exited 1, QEMU ended abnormally: cleaned up", end: accident(func(e *launcherEnd) { e.Status = exited(1) }), reason: "QEMU ended abnormally"},
		{name: "exited 2, fatal start-up error or a panic: cleaned up", end: accident(func(e *launcherEnd) { e.Status = exited(2) }), reason: "fatal error"},
		{name: "exited with a status of no meaning: believed, cleaned up", end: accident(func(e *launcherEnd) { e.Status = exited(42) }), reason: "status 42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideRestart(tc.end)
			if got.Restart != tc.restart {
				t.Errorf("restart = %v (%s), want %v", got.Restart, got.Reason, tc.restart)
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("reason %q does not say %q", got.Reason, tc.reason)
			}
		})
	}
}

// TestLauncherExitCodes: the monitor's copy of the launcher's exit
// statuses is the launcher's.
func TestLauncherExitCodes(t *testing.T) {
	for _, c := range [][2]int{
		{launcherExitOK, launcher.ExitOK},
		{launcherExitQEMUDied, launcher.ExitQEMUDied},
		{launcherExitFatal, launcher.ExitFatal},
		{launcherExitHandOver, launcher.ExitHandOver},
		{int(signalHandOver), int(launcher.SignalHandOver)},
	} {
		if c[0] != c[1] {
			t.Errorf("monitor's launcher exit status %d, the launcher's %d", c[0], c[1])
		}
	}
}

// TestLauncherEnv: the launcher crashes with a signal on a panic
// (GOTRACEBACK=crash) unless the pod's environment chose otherwise.
func TestLauncherEnv(t *testing.T) {
	env := []string{"PATH=/bin", "A=1"}
	got := launcherEnv(env)
	if !slices.Equal(got, []string{"PATH=/bin", "A=1", "GOTRACEBACK=crash"}) {
		t.Errorf("launcherEnv = %q", got)
	}
	if !slices.Equal(env, []string{"PATH=/bin", "A=1"}) {
		t.Errorf("launcherEnv changed its argument: %q", env)
	}
	set := []string{"GOTRACEBACK=all", "PATH=/bin"}
	if got := launcherEnv(set); !slices.Equal(got, set) {
		t.Errorf("launcherEnv with GOTRACEBACK set = %q, want it kept", got)
	}
}

// TestTermPending: a termination signal queued with the launcher's death
// counts as the pod terminating (no restart); SIGCHLDs alone do not.
func TestTermPending(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued []os.Signal
		want   bool
	}{
		{name: "nothing queued", want: false},
		{name: "only SIGCHLDs", queued: []os.Signal{syscall.SIGCHLD, syscall.SIGCHLD}, want: false},
		{name: "a SIGTERM behind a SIGCHLD", queued: []os.Signal{syscall.SIGCHLD, syscall.SIGTERM}, want: true},
		{name: "a SIGINT", queued: []os.Signal{syscall.SIGINT}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigs := make(chan os.Signal, len(tc.queued))
			for _, s := range tc.queued {
				sigs <- s
			}
			if got := termPending(sigs); got != tc.want {
				t.Errorf("termPending = %v, want %v", got, tc.want)
			}
			if len(sigs) != 0 {
				t.Errorf("%d signals left in the queue", len(sigs))
			}
		})
	}
}
