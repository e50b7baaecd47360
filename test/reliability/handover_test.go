package reliability

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launcher"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestLauncherHandOver: a launcher upgrade without a migration. A new
// launcher binary is put in place of the running one's (renamed over it,
// as a package manager does), and SIGUSR2 to the monitor asks the running
// launcher to hand over: it leaves with exit 3, the guest running, and the
// monitor starts the new binary, which takes the guest over. The same
// QEMU throughout, one boot, launcher-sock never missing and answering
// again within answerBound; the hand-over is counted; SIGTERM at the end
// still ends the pod cleanly.
func TestLauncherHandOver(t *testing.T) {
	t.Parallel()
	p := newPodDeferred(t, "handover", podOpts{grace: 3})
	dir := filepath.Join(p.Dir, "launcher-bin")
	launchertest.Must(t, os.Mkdir(dir, 0o755))
	bin := filepath.Join(dir, "virt-launcher")
	install := func(extra string) {
		b, err := os.ReadFile(filepath.Join(env.BinDir, "virt-launcher"))
		launchertest.Must(t, err)
		// Bytes after an ELF file's end change nothing when it runs: a
		// stand-in for a newer build.
		launchertest.Must(t, os.WriteFile(bin+".new", append(b, extra...), 0o755))
		launchertest.Must(t, os.Rename(bin+".new", bin))
	}
	install("")
	p.SetEnv(monitor.EnvLauncherBin, bin)
	p.Start()
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	v := p.vmi()
	qemu := p.QemuPid()
	watch := watchSocket(p.Layout.ReadySocket())
	defer watch.stop()

	old := p.MustChild("virt-launcher")
	install("upgrade")
	var st syscall.Stat_t
	launchertest.Must(t, syscall.Stat(bin, &st))
	t0 := time.Now()
	p.Signal(launcher.SignalHandOver)
	c = dialAgain(t, ctx, p, old, t0)
	took := time.Since(t0)
	t.Logf("hand-over: launcher-sock answered again after %v", took.Round(time.Millisecond))
	if took > answerBound {
		t.Errorf("launcher-sock answered only after %v (bound %v)", took, answerBound)
	}
	next := p.MustChild("virt-launcher")
	var exe syscall.Stat_t
	launchertest.Must(t, syscall.Stat(filepath.Join("/proc", strconv.Itoa(next), "exe"), &exe))
	if exe.Ino != st.Ino || exe.Dev != st.Dev {
		t.Errorf("the new launcher (pid %d) runs inode %d, not the binary put in place (inode %d)", next, exe.Ino, st.Ino)
	}
	guestTakenOver(t, ctx, p, c, v, qemu, "after the hand-over")
	missing, longest := watch.stop()
	if missing > 0 || longest > answerBound {
		t.Errorf("launcher-sock: missing %d times, refused for %v in a row (bound %v)", missing, longest, answerBound)
	}
	if n := testguest.CountMarker(p.Console(), testguest.MarkerBooted); n != 1 {
		t.Errorf("%d boot markers on the console, want 1 (the guest rebooted)", n)
	}
	if !strings.Contains(p.Stderr.String(), "handing over to a new launcher") {
		t.Error("the old launcher did not log its hand-over")
	}
	if rec, ok, err := monitor.ReadRestarts(p.Layout.PrivateDir); err != nil || !ok || rec.Count != 1 || !strings.Contains(rec.Reason, "handed over") {
		t.Errorf("restart record %+v (found %v, err %v), want one hand-over", rec, ok, err)
	}

	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(2 * time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	p.assertNothingLeft()
}
