package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
)

// TestMigrationSourceLauncherDies: the source pod's launcher is killed
// (SIGKILL) while a live migration runs. Its monitor starts a new
// launcher, whose daemon cancels the unfinished outgoing migration; the
// new launcher reports it failed, saying why, and the guest runs on in
// the source pod: same QEMU, still counting.
func TestMigrationSourceLauncherDies(t *testing.T) {
	mp := newMigrationPair(t, false)
	mp.prepareTarget(t)
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, slow()))
	mp.waitMigrating(t)
	qemu := mp.a.QemuPid()
	old := childNamed(t, mp.a.Cmd.Process.Pid, "virt-launcher")
	launchertest.Must(t, syscall.Kill(old, syscall.SIGKILL))

	deadline := time.Now().Add(30 * time.Second)
	var c *cmdclient.Client
	for c == nil {
		if pid := childNamedOrZero(mp.a.Cmd.Process.Pid, "virt-launcher"); pid != 0 && pid != old {
			dctx, cancel := context.WithTimeout(mp.ctx, time.Second)
			if nc, err := cmdclient.Dial(dctx, mp.a.Layout.ReadySocket()); err == nil {
				c = nc
				t.Cleanup(func() { nc.Close() })
			}
			cancel()
		}
		if c == nil && time.Now().After(deadline) {
			t.Fatalf("no new launcher answering 30 s after the kill:\n%s", launchertest.Tail(mp.a.Stderr.String(), 6000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	m := waitMigration(t, mp.ctx, c, "source", time.Minute)
	if !m.Failed || m.UID != "mig-1" || !strings.Contains(m.FailureReason, "launcher") {
		t.Errorf("the migration its launcher died under: %+v, want mig-1 failed, saying why", m)
	}
	t.Logf("reported: %s", m.FailureReason)
	if now := mp.a.QemuPid(); now != qemu {
		t.Errorf("the source's QEMU is pid %d, was %d", now, qemu)
	}
	mp.ca = c
	mp.stillCounting(t)
}
