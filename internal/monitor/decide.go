package monitor

import (
	"fmt"
	"syscall"
	"time"
)

// Launcher exit statuses with a meaning of their own (internal/launcher,
// kubevirt-wire.md 5.6). The monitor must not import the launcher, so they
// are repeated here; TestLauncherExitCodes keeps them equal.
const (
	launcherExitOK       = 0 // the domain is gone
	launcherExitQEMUDied = 1 // QEMU ended abnormally
	launcherExitFatal    = 2 // fatal start-up error (also a Go panic's status without GOTRACEBACK=crash)
	launcherExitHandOver = 3 // left on SIGUSR2 for a new launcher to take the guest over
)

// MaxHandOvers bounds the hand-overs within the restart window: each is
// asked for, but a launcher binary that exits 3 as soon as it starts
// must not be started for ever.
const MaxHandOvers = 10

// Restart budget defaults: more deaths than this within the window mean
// the launcher cannot run here, and the pod ends as KubeVirt's does.
const (
	DefaultRestarts      = 5
	DefaultRestartWindow = 10 * time.Minute
)

// launcherEnd is what the monitor knows when the launcher has ended, the
// input of decideRestart.
type launcherEnd struct {
	// Status is the launcher's wait status.
	Status syscall.WaitStatus
	// Terminating: a termination was asked for (a signal forwarded to the
	// launcher, the context cancelled): the grace period runs, and the
	// launcher's end is the pod's.
	Terminating bool
	// QemuAlive: a QEMU of this pod still runs.
	QemuAlive bool
	// Unresponsive: virt-handler's launcher-unresponsive marker is beside
	// launcher-sock; the handler fails the VMI whatever we do.
	Unresponsive bool
	// OffForVMI: the VMI asks for no restarts (its launcher left the
	// layout.LauncherRestartsOff marker).
	OffForVMI bool
	// HandOvers are the times of the hand-overs done so far (exit 3,
	// asked for with SIGUSR2): at most MaxHandOvers within Window.
	HandOvers []time.Time
	// Restarts are the times of the restarts after accidents done so far.
	Restarts []time.Time
	// Now is the time of the decision.
	Now time.Time
	// Budget is at most Budget restarts within Window; 0 turns restarts
	// off.
	Budget int
	Window time.Duration
}

// decision is decideRestart's answer: restart the launcher, or clean up
// and end the pod as before. Reason says why, for the log.
type decision struct {
	Restart bool
	Reason  string
}

// decideRestart decides whether a launcher that ended is started again
// (and takes the running guest back) or the monitor cleans up (stopping
// QEMU) and ends the pod with the launcher's status. A launcher is started
// again only when its end was an accident: it died of a signal (an OOM
// kill, SIGKILL, a Go panic or fatal runtime error, which the launcher's
// GOTRACEBACK=crash turns into SIGABRT: launcherEnv), nobody asked the pod
// to end, there is a guest to keep, virt-handler has not given up on it,
// and the budget is not spent. A launcher that exited by itself with a
// status said what happened (the guest ended, start-up failed): it is
// believed. (A panic of a launcher run with GOTRACEBACK set otherwise
// exits with status 2, as a fatal start-up error does, and ends the pod.)
func decideRestart(e launcherEnd) decision {
	switch {
	case e.Terminating:
		return decision{false, "termination was asked for"}
	case e.Status.Exited() && e.Status.ExitStatus() == launcherExitHandOver && e.QemuAlive:
		// Asked for, not an accident: neither the budget nor a switch
		// that turns accident restarts off applies; refusing would end
		// the guest that the launcher left running for its successor.
		// (Without a QEMU there is nothing to hand over: the status is
		// believed as any other below, so no launcher that exits 3 at
		// once can make the monitor start it for ever.)
		if n := within(e.HandOvers, e.Now, e.Window); n >= MaxHandOvers {
			return decision{false, fmt.Sprintf("hand-overs spent: %d within %v (a launcher that exits 3 at once is no hand-over)", n, e.Window)}
		}
		return decision{true, "the launcher handed over (exit 3): a new one takes the guest over"}
	case e.Budget <= 0:
		return decision{false, "restarts are switched off (" + EnvRestarts + "=0)"}
	case e.OffForVMI:
		return decision{false, "the VMI asks for none (its annotation virtlauncher.io/launcher-restarts is off)"}
	case e.Status.Exited():
		return decision{false, exitReason(e.Status.ExitStatus())}
	case !e.Status.Signaled():
		return decision{false, "the launcher's end is neither an exit nor a signal"}
	case e.Unresponsive:
		return decision{false, "virt-handler marked the launcher unresponsive (launcher-unresponsive exists): it fails the VMI whatever runs"}
	case !e.QemuAlive:
		return decision{false, "no QEMU of this pod runs: there is no guest to keep"}
	}
	recent := within(e.Restarts, e.Now, e.Window)
	if recent >= e.Budget {
		return decision{false, fmt.Sprintf("restart budget spent: %d restarts within %v", recent, e.Window)}
	}
	return decision{true, fmt.Sprintf("the launcher died of signal %d (%v) with the guest running; restart %d of at most %d within %v", int(e.Status.Signal()), e.Status.Signal(), recent+1, e.Budget, e.Window)}
}

// within counts the times less than window before now.
func within(ts []time.Time, now time.Time, window time.Duration) int {
	n := 0
	for _, t := range ts {
		if now.Sub(t) < window {
			n++
		}
	}
	return n
}

// exitReason says what a launcher's exit status means.
func exitReason(code int) string {
	switch code {
	case launcherExitOK:
		return "the launcher exited normally: the domain is gone"
	case launcherExitQEMUDied:
		return "the launcher exited 1: QEMU ended abnormally"
	case launcherExitFatal:
		return "the launcher exited 2: a fatal error (start-up, or a Go panic)"
	case launcherExitHandOver:
		return "the launcher exited 3 (a hand-over) with no QEMU of this pod left: nothing to take over"
	}
	return fmt.Sprintf("the launcher exited with status %d", code)
}
