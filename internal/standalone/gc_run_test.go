package standalone_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

// TestVlctlGCAfterSIGKILL (a kill must not leak): `vlctl run` killed with
// SIGKILL while its guest runs leaves its processes, its two network
// namespaces, the ACL entry on the user's disk and its work dir; its record
// stays, shown as stale by vlctl ps, and `vlctl gc` removes all of it.
func TestVlctlGCAfterSIGKILL(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	records := e.records
	hd := filepath.Join(e.dir, "hd.img")
	// A guest that stays up, on the default pod network.
	cmd, _, _, exited := startStayingGuest(t, e, "gc", true)

	entries, err := runrecord.List(records)
	if err != nil || len(entries) != 1 {
		t.Fatalf("records: %+v, %v; want one", entries, err)
	}
	rec := entries[0]
	if len(rec.NetNS) != 2 || len(rec.Grants) == 0 || rec.UID == 0 {
		t.Fatalf("the record names netns %v, ACL grants %+v and uid %d; want two, some and one", rec.NetNS, rec.Grants, rec.UID)
	}
	lease := filepath.Join(uidpool.DefaultDir, strconv.FormatUint(uint64(rec.UID), 10))
	if _, err := os.Stat(lease); err != nil {
		t.Errorf("no lease for the run's uid while it runs: %v", err)
	}
	for _, n := range rec.NetNS {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err != nil {
			t.Errorf("recorded netns %s does not exist while the run runs: %v", n, err)
		}
	}
	if _, err := unix.Getxattr(hd, "system.posix_acl_access", make([]byte, 256)); err != nil {
		t.Errorf("%s has no ACL while the run runs: %v", hd, err)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	// Nobody else cleans up: what gc removes below was there.
	for _, n := range rec.NetNS {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err != nil {
			t.Errorf("netns %s gone right after the SIGKILL, before vlctl gc: %v", n, err)
		}
	}
	if _, err := os.Stat(rec.WorkDir); err != nil {
		t.Errorf("work dir gone right after the SIGKILL, before vlctl gc: %v", err)
	}
	if _, err := os.Stat(lease); err != nil {
		t.Errorf("uid lease gone right after the SIGKILL, before vlctl gc: %v", err)
	}
	if code, out, stderr := vlctl(t, time.Minute, "ps", "--record-dir", records); code != 0 || !strings.Contains(out, "stale") {
		t.Errorf("vlctl ps after the SIGKILL: exit %d, want the run shown as stale:\n%s%s", code, out, stderr)
	}
	t0 := time.Now()
	code, _, stderr := vlctl(t, 2*time.Minute, "gc", "--record-dir", records, "--timeout", "30s")
	t.Logf("vlctl gc: exit %d after %v:\n%s", code, time.Since(t0).Round(time.Millisecond), stderr)
	if code != 0 {
		t.Errorf("vlctl gc: exit %d", code)
	}
	for _, n := range rec.NetNS {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns %s left after vlctl gc (%v)", n, err)
		}
	}
	for _, name := range []string{"hd.img", "pvc.img", "dv.img"} {
		p := filepath.Join(e.dir, name)
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v after vlctl gc, want 0600 as before", name, st.Mode().Perm())
		}
		if _, err := unix.Getxattr(p, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s: an ACL is left after vlctl gc (%v)", name, err)
		}
	}
	e.checkNothingLeft(t)
	// A second gc finds nothing to do.
	if code, _, stderr := vlctl(t, time.Minute, "gc", "--record-dir", records); code != 0 || stderr != "" {
		t.Errorf("a second vlctl gc: exit %d, output %q; want 0 and nothing", code, stderr)
	}
}

// TestVlctlRunMonitorKilled (a kill must not leak): the monitor of a running
// guest killed with SIGKILL takes the launcher and QEMU with it; `vlctl
// run` reports the failure (never a clean end), waits until nothing runs
// as the VM's id any more before it removes anything, and leaves nothing:
// no process, no work dir, no record, no uid lease.
func TestVlctlRunMonitorKilled(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	cmd, _, stderr, exited := startStayingGuest(t, e, "mk", false)
	uid, run := e.runProcesses(t)
	monitor, qemu := run.monitor, run.qemu
	if err := syscall.Kill(monitor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("vlctl run still runs 2 minutes after its monitor was killed")
	}
	t.Logf("vlctl run ended %v after the monitor's SIGKILL, exit %d:\n%s", time.Since(t0).Round(time.Millisecond), cmd.ProcessState.ExitCode(), stderr.String())
	if cmd.ProcessState.ExitCode() == 0 {
		t.Error("vlctl run exited 0 after its monitor was killed")
	}
	if !strings.Contains(stderr.String(), "exited while the guest ran") {
		t.Errorf("vlctl run did not say the launcher went away under the guest:\n%s", stderr.String())
	}
	if pids, err := procfs.Holding("/proc", uid); err != nil || len(pids) > 0 {
		t.Errorf("processes %v still run as the VM's uid %d (%v)", pids, uid, err)
	}
	if st, err := procfs.ReadStat("/proc", qemu); err == nil && st.State != 'Z' {
		t.Errorf("QEMU (pid %d) still runs", qemu)
	}
	e.checkNothingLeft(t)
}

// runProcs are the processes of a `vlctl run` that matter to its tests.
type runProcs struct{ monitor, daemon, qemu int }

// runProcesses finds the one run recorded in the keep environment: its
// uid, and its monitor, libvirt daemon and QEMU among the processes of its
// work root, all of which must be there.
func (e keepEnv) runProcesses(t *testing.T) (uid uint32, run runProcs) {
	t.Helper()
	entries, err := runrecord.List(e.records)
	if err != nil || len(entries) != 1 || entries[0].UID == 0 {
		t.Fatalf("records: %+v, %v; want one with a uid", entries, err)
	}
	procs, err := procfs.Under("/proc", e.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		switch {
		case p.Comm == "virt-launcher-m":
			run.monitor = p.PID
		case p.Comm == "libvirtd" || p.Comm == "virtqemud":
			run.daemon = p.PID
		case strings.HasPrefix(p.Comm, "qemu"):
			run.qemu = p.PID
		}
	}
	if run.monitor == 0 || run.daemon == 0 || run.qemu == 0 {
		t.Fatalf("no monitor, daemon or QEMU among the run's processes: %+v", procs)
	}
	return entries[0].UID, run
}

// startStayingGuest starts `vlctl run` of the keep environment's guest,
// one that stays up (on the default pod network with network), recorded
// in the environment's record dir, its storage mapped, and waits until
// the guest booted.
func startStayingGuest(t *testing.T, e keepEnv, name string, network bool) (*exec.Cmd, *testenv.SyncBuffer, *testenv.SyncBuffer, chan error) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, "hd.img"), make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(e.doc("Once", name), " "+testguest.OptPowerOff, "", 1)
	if network {
		doc = strings.Replace(doc, "autoattachPodInterface: false\n", "autoattachPodInterface: true\n", 1)
	}
	cmd, stdout, stderr, exited := startVlctl(t, e.run(
		"--volume", "claim1="+filepath.Join(e.dir, "pvc.img")+",size=8Mi", "--volume", "dv1="+filepath.Join(e.dir, "dv.img"), e.write(t, name, doc))...)
	waitFor(t, "the guest", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerBooted)
	})
	return cmd, stdout, stderr, exited
}
