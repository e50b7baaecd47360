package reliability

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestOneGuestUnderFire shares one booted guest between the checks that
// do not end it, then ends it: security properties of the running pod
// (sandbox, modes, ports, uids) with an unrelated qemu-system-x86_64
// running beside it; 20 concurrent clients; kill -9 of the libvirt daemon
// and of virtlogd when the pod runs one (the guest keeps running and its
// console answers); and
// finally kill -9 of QEMU (launcher and monitor fail, nothing is left, the
// unrelated process survives).
func TestOneGuestUnderFire(t *testing.T) {
	t.Parallel()
	env.Need(t)
	// An unrelated process named like QEMU, of the same user as the
	// launcher's QEMU: the launcher and monitor must never signal it.
	decoy := startDecoy(t)

	p := newPod(t, "fire", podOpts{})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	qpid := p.QemuPid()
	faults := 0

	t.Run("security", func(t *testing.T) { checkSecurity(t, p, qpid) })
	t.Run("concurrency", func(t *testing.T) { concurrentClients(t, p, ctx) })

	// One kill of each in the default run, ten under soak.
	rounds := 1
	if soak() {
		rounds = 10
	}
	killsOK := t.Run("kill libvirt daemon", func(t *testing.T) {
		for r := 0; r < rounds; r++ {
			daemon := p.MustChild("libvirtd", "virtqemud")
			launchertest.Must(t, syscall.Kill(daemon, syscall.SIGKILL))
			waitNewChild(t, p, daemon, "libvirtd", "virtqemud")
			if !launchertest.Alive(qpid) {
				t.Fatal("QEMU died with the libvirt daemon")
			}
			consoleAnswers(t, p, fmt.Sprintf("after-daemon-kill-%d", r))
			waitStatus(t, ctx, c, "Running")
			if err := c.Sync(ctx, p.vmi(), nil); err != nil {
				t.Errorf("Sync through the restarted daemon: %v", err)
			}
			faults++
		}
	})
	killsOK = t.Run("kill virtlogd", func(t *testing.T) {
		if p.Child("virtlogd") == 0 {
			// virtlogd is off by default (a whole libvirt process, about
			// 17 MiB RSS, only to write two log files): QEMU writes the
			// serial log itself, so it must keep recording across the
			// daemon kill above (with virtlogd that was only measured).
			tag := "no-virtlogd"
			consoleAnswers(t, p, tag)
			logged := false
			for i := 0; i < 50 && !logged; i++ {
				logged = strings.Contains(p.Console(), fmt.Sprintf("VLPING-%s-42", tag))
				time.Sleep(100 * time.Millisecond)
			}
			if !logged {
				t.Errorf("console output after the daemon kill is missing from the serial log %s:\n%s", p.Layout.SerialLog(p.UID), launchertest.Tail(p.Console(), 1000))
			}
			// kill -9 of virtlogd needs a launcher started with virtlogd
			// on, which newPod cannot ask for yet; internal/libvirtd's
			// TestLogs/with_virtlogd covers it under a booted guest.
			t.Skip("virtlogd is off by default (QEMU writes its logs itself): no virtlogd to kill in this pod; the serial log kept recording without it; kill -9 of virtlogd is tested in internal/libvirtd TestLogs/with_virtlogd")
		}
		for r := 0; r < rounds; r++ {
			logd := p.MustChild("virtlogd")
			launchertest.Must(t, syscall.Kill(logd, syscall.SIGKILL))
			waitNewChild(t, p, logd, "virtlogd")
			if !launchertest.Alive(qpid) {
				t.Fatal("QEMU died with virtlogd")
			}
			tag := fmt.Sprintf("after-virtlogd-kill-%d", r)
			consoleAnswers(t, p, tag)
			waitStatus(t, ctx, c, "Running")
			faults++
			// The console log file is virtlogd's: QEMU's pipe to the
			// killed one is gone. Measured, not asserted (libvirt keeps no
			// log pipe across a virtlogd crash; only a SIGUSR1 re-exec
			// preserves it).
			logged := false
			for i := 0; i < 20 && !logged; i++ {
				logged = strings.Contains(p.Console(), fmt.Sprintf("VLPING-%s-42", tag))
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("console output after the virtlogd kill reaches the serial log file: %v", logged)
		}
	}) && killsOK
	if !killsOK {
		return
	}

	// kill -9 of QEMU ends the pod with a failure status.
	launcher := p.MustChild("virt-launcher")
	launchertest.Must(t, syscall.Kill(qpid, syscall.SIGKILL))
	code := p.ExitCode(90 * time.Second)
	if code == 0 {
		t.Errorf("monitor exit status 0 after QEMU was killed, want a failure")
	}
	if launchertest.Alive(launcher) {
		t.Errorf("launcher %d still alive after the monitor exited", launcher)
	}
	// Reported: the launcher logged the crash it saw.
	if out := p.Stderr.String(); !strings.Contains(out, `"statusReason":"Crashed"`) || !strings.Contains(out, "QEMU is gone") {
		t.Errorf("the launcher did not report QEMU's crash:\n%s", launchertest.Tail(out, 3000))
	}
	p.assertNothingLeft()
	faults++
	if !launchertest.Alive(decoy) {
		t.Errorf("the unrelated qemu-system-x86_64 (pid %d) was killed", decoy)
	}
	t.Logf("faults survived: %d (daemon, virtlogd, QEMU kill -9 with status %d); decoy %d alive", faults, code, decoy)
}

// startDecoy runs a copy of /bin/sleep named qemu-system-x86_64 as user
// virtlauncher, outside any pod, and returns its pid.
func startDecoy(t *testing.T) int {
	t.Helper()
	dir, err := os.MkdirTemp("", "vlrdecoy")
	launchertest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	launchertest.Must(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "qemu-system-x86_64")
	b, err := os.ReadFile("/bin/sleep")
	launchertest.Must(t, err)
	launchertest.Must(t, os.WriteFile(bin, b, 0o755))
	cmd := exec.Command(bin, "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: env.Cred, Setpgid: true}
	launchertest.Must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func waitNewChild(t *testing.T, p *pod, old int, names ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if nd := p.Child(names...); nd != 0 && nd != old {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v not restarted:\n%s", names, launchertest.Tail(p.Stderr.String(), 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitStatus waits until GetDomain reports status.
func waitStatus(t *testing.T, ctx context.Context, c *cmdclient.Client, status string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, exists, err := c.GetDomain(ctx)
		if err == nil && exists && d.Status.Status == status {
			return
		}
		if time.Now().After(deadline) {
			st := "none"
			if d != nil {
				st = d.Status.Status + "/" + d.Status.Reason
			}
			t.Fatalf("GetDomain: status %s (exists %v, err %v), want %s", st, exists, err, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consoleAnswers types a command on the serial console socket and waits
// for its output: the guest is alive and its console is served.
func consoleAnswers(t *testing.T, p *pod, tag string) {
	t.Helper()
	conn, err := net.DialTimeout("unix", p.Layout.SerialSocket(p.UID), 5*time.Second)
	if err != nil {
		t.Fatalf("console socket: %v", err)
	}
	defer conn.Close()
	// The shell prints the sum, which the typed line does not contain.
	want := fmt.Sprintf("VLPING-%s-%d", tag, 40+2)
	cmd := fmt.Sprintf("\necho VLPING-%s-$((40+2))\n", tag)
	deadline := time.Now().Add(30 * time.Second)
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte(cmd)); err != nil {
		t.Fatalf("write console: %v", err)
	}
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), want) {
		n, err := conn.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("console did not answer %q (%v); read %q", want, err, launchertest.Tail(got.String(), 500))
		}
	}
}

// concurrentClients runs 20 clients at once, each with its own connection,
// calling Sync, GetDomain, Pause and Unpause for 20 s (60 s under soak),
// and checks that every call ends within its deadline with success or a
// clear error, that the state follows the last operation, and that the
// launcher holds no more fds or threads afterwards.
func concurrentClients(t *testing.T, p *pod, ctx context.Context) {
	const clients = 20
	dur := 20 * time.Second
	if soak() {
		dur = 60 * time.Second
	}
	launcher := p.MustChild("virt-launcher")
	fds0, threads0, rss0 := fdCount(launcher), threadCount(launcher), rssKiB(launcher)
	v := p.vmi()
	var ops, failed, slow atomic.Int64
	var firstErr atomic.Value
	errs := make(chan error, clients)
	stop := time.Now().Add(dur)
	for i := 0; i < clients; i++ {
		go func(i int) {
			c, err := cmdclient.Dial(ctx, p.Layout.ReadySocket())
			if err != nil {
				errs <- fmt.Errorf("client %d: dial: %w", i, err)
				return
			}
			defer c.Close()
			for n := 0; time.Now().Before(stop); n++ {
				var err error
				var limit time.Duration
				t0 := time.Now()
				switch (i + n) % 4 {
				case 0:
					err, limit = c.Sync(ctx, v, nil), cmdclient.LongTimeout
				case 1:
					// exists, not d: a nil *Domain in an interface{} is not nil,
					// so comparing d would never catch a missing domain.
					var exists bool
					_, exists, err = c.GetDomain(ctx)
					limit = cmdclient.ShortTimeout
					if err == nil && !exists {
						err = fmt.Errorf("GetDomain: no domain while the guest runs")
					}
				case 2:
					err, limit = c.Pause(ctx, v), cmdclient.LongTimeout
				case 3:
					err, limit = c.Unpause(ctx, v), cmdclient.LongTimeout
				}
				ops.Add(1)
				if time.Since(t0) >= limit {
					slow.Add(1)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					if strings.Contains(err.Error(), "DeadlineExceeded") || strings.TrimSpace(err.Error()) == "" {
						errs <- fmt.Errorf("client %d: %w", i, err)
						return
					}
				}
			}
			errs <- nil
		}(i)
	}
	for i := 0; i < clients; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(dur + 2*cmdclient.LongTimeout):
			t.Fatalf("clients still running %v after the end: deadlock", 2*cmdclient.LongTimeout)
		}
	}
	if slow.Load() > 0 {
		t.Errorf("%d calls took their full deadline", slow.Load())
	}
	// Every call that failed said why; the domain is still there; the
	// last operation decides the state.
	c := p.Client(ctx)
	launchertest.Must(t, c.Pause(ctx, v))
	waitStatus(t, ctx, c, "Paused")
	launchertest.Must(t, c.Sync(ctx, v, nil))
	waitStatus(t, ctx, c, "Paused") // Sync keeps a user's pause
	launchertest.Must(t, c.Unpause(ctx, v))
	waitStatus(t, ctx, c, "Running")
	consoleAnswers(t, p, "after-storm")

	// Connections of the 20 clients are closed: fds come back.
	var fds1, threads1 int
	deadline := time.Now().Add(10 * time.Second)
	for {
		fds1, threads1 = fdCount(launcher), threadCount(launcher)
		if fds1 <= fds0+1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if fds1 > fds0+1 {
		t.Errorf("launcher fds %d before, %d after the clients closed: leak", fds0, fds1)
	}
	if threads1 > threads0+4 {
		t.Errorf("launcher threads %d before, %d after", threads0, threads1)
	}
	// No goroutine count from outside the launcher; its memory stands in:
	// one leaked goroutine per call (8 KiB of stack at least) over
	// thousands of calls would add tens of MiB.
	rss1 := rssKiB(launcher)
	if rss1-rss0 > 48<<10 {
		t.Errorf("launcher RSS %d KiB before, %d KiB after the clients: leak", rss0, rss1)
	}
	msg := ""
	if e := firstErr.Load(); e != nil {
		msg = fmt.Sprintf(" (first error: %.200s)", e)
	}
	t.Logf("concurrency: %d clients, %d operations in %v, %d failed with a message%s; launcher fds %d -> %d, threads %d -> %d, RSS %d -> %d KiB",
		clients, ops.Load(), dur, failed.Load(), msg, fds0, fds1, threads0, threads1, rss0, rss1)
}

func fdCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

func rssKiB(pid int) int {
	for _, f := range idLine(pid, "VmRSS:") {
		if n, err := strconv.Atoi(f); err == nil {
			return n
		}
	}
	return 0
}

func threadCount(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return len(ents)
}

// TestSIGTERMTwiceNoACPI: a guest that ignores the ACPI power button, two
// SIGTERMs a second apart: the second changes nothing, the guest is
// destroyed when the grace period ends, status 0, nothing left.
func TestSIGTERMTwiceNoACPI(t *testing.T) {
	t.Parallel()
	const grace = 4
	p := newPod(t, "noacpi", podOpts{grace: grace})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c, testguest.OptNoACPI)
	qpid := p.QemuPid()
	t0 := time.Now()
	p.Signal(syscall.SIGTERM)
	time.Sleep(time.Second)
	p.Signal(syscall.SIGTERM)
	p.WaitConsole(testguest.MarkerACPIIgnored, 30*time.Second)
	code := p.ExitCode(90 * time.Second)
	took := time.Since(t0)
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	if took < grace*time.Second {
		t.Errorf("exited %v after the first SIGTERM, before the %d s grace period", took, grace)
	}
	if strings.Contains(p.Console(), testguest.MarkerPowerOff) {
		t.Errorf("guest powered off although it ignores ACPI")
	}
	if launchertest.Alive(qpid) {
		t.Errorf("QEMU %d alive", qpid)
	}
	p.assertNothingLeft()
	t.Logf("two SIGTERMs, guest ignoring ACPI: destroyed, exit after %v (grace %d s)", took.Round(time.Millisecond), grace)
}

// TestSIGTERMDuringSync: SIGTERM reaches the monitor while the launcher is
// in the middle of a Sync (preparing disks, defining, starting). The Sync
// call returns (success or a clear error), the launcher shuts down within
// the grace period, and nothing is left.
func TestSIGTERMDuringSync(t *testing.T) {
	t.Parallel()
	const grace = 3
	p := newPod(t, "termsync", podOpts{grace: grace})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Sync(ctx, p.vmi(), nil) }()
	// The overlay is the first thing Sync makes.
	overlay := p.Layout.DiskOverlay("root")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(overlay); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Logf("Sync finished before the overlay was seen (%v); SIGTERM after it", err)
			done <- err
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no overlay after 30 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	p.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil && strings.TrimSpace(err.Error()) == "" {
			t.Errorf("Sync failed without a message")
		}
		t.Logf("Sync interrupted by SIGTERM returned: %v", err)
	case <-time.After(cmdclient.LongTimeout + 5*time.Second):
		t.Errorf("Sync did not return after SIGTERM")
	}
	code := p.ExitCode(60 * time.Second)
	if code != 0 && code != 1 && code != 2 {
		t.Errorf("exit status %d after SIGTERM during Sync", code)
	}
	t.Logf("SIGTERM during Sync: exit status %d", code)
	p.assertNothingLeft()
	// The launcher, not the monitor's last-resort cleanup, must end the
	// guest a Sync started: the grace period and the exit status depend on
	// it.
	out := p.Stderr.String()
	if strings.Contains(out, "terminating QEMU left behind") {
		t.Errorf("the monitor had to terminate a QEMU the launcher left behind")
	}
	// A SIGTERM while the first Sync prepared the disks: the Sync must
	// not define the domain after the launcher saw none defined.
	if early := strings.Index(out, "signal before any domain was defined"); early >= 0 && strings.LastIndex(out, "domain defined") > early {
		t.Errorf("the Sync defined the domain after the launcher decided to end with none defined")
	}
}

// TestDiskFullOverlay: the ephemeral disk directory is a small tmpfs. At
// 128 KiB the containerDisk's qcow2 overlay (196 KiB) does not fit; at
// 256 KiB it does, but the cloud-init ISO made after it does not. Either
// way the Sync fails with a clear error naming the volume, no partial file
// is left in that directory, no domain is defined, and the launcher keeps
// serving.
func TestDiskFullOverlay(t *testing.T) {
	for _, tc := range []struct{ size, volume string }{{"128k", "root"}, {"256k", "cloudinit"}} {
		t.Run(tc.size, func(t *testing.T) {
			t.Parallel()
			diskFull(t, tc.size, tc.volume)
		})
	}
}

func diskFull(t *testing.T, size, volume string) {
	p := newPod(t, "full", podOpts{ephemeralTmpfs: size})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	before := podFiles(p)
	err := c.Sync(ctx, p.vmi(), nil)
	if err == nil {
		t.Fatalf("Sync succeeded with a full ephemeral disk directory")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "no space left") {
		t.Errorf("error %q does not say the disk is full", err)
	}
	if !strings.Contains(err.Error(), volume) {
		t.Errorf("error %q does not name the volume %s", err, volume)
	}
	// A partial file (a temporary one, or any file in the full tmpfs
	// that is not a whole volume) is an error; whole volumes made before
	// the failing one are the known bug reported below.
	var partial, whole []string
	for f := range podFiles(p) {
		if before[f] {
			continue
		}
		fi, _ := os.Stat(f)
		desc := fmt.Sprintf("%s (%d bytes)", f, fi.Size())
		if strings.Contains(filepath.Base(f), ".tmp-") || !strings.HasSuffix(f, "/disk.qcow2") && !strings.HasSuffix(f, ".qcow2") {
			partial = append(partial, desc)
		} else {
			whole = append(whole, desc)
		}
	}
	if len(partial) > 0 {
		t.Errorf("partial files left after the failed Sync: %v", partial)
	}
	if _, exists, err := c.GetDomain(ctx); err != nil || exists {
		t.Errorf("domain after the failed Sync: exists=%v err=%v", exists, err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("launcher stopped answering: %v", err)
	}
	t.Logf("disk full (%s): %v", size, err)
	p.Signal(syscall.SIGTERM)
	p.ExitCode(60 * time.Second)
	p.assertNothingLeft()
	if len(whole) > 0 {
		t.Errorf("the volumes prepared before the one that failed stay behind after the failed Sync: %v", whole)
	}
}
