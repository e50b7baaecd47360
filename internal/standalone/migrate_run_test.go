package standalone_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlRunMigrate: `vlctl run --migrate-from NAME` takes a
// running guest over by live migration into a pod of its own, twice in a
// row (the second hop's launcher sees its pod at the first run's path as
// well). At each hop the guest goes on counting on its serial console in
// the new run from where it was, without booting again, and keeps its
// address in the pod; the old run ends with status 0 saying where the
// guest went, its network namespaces gone. The published port answers
// after each hop (and after a cancelled migration), and is never free
// for another local user to bind in between: the old run hands its
// listener over. The first run's work dir is
// kept, empty, while a run of the VM uses it. When the last run is
// stopped, nothing is left: no work dir, no record, no uid lease, no
// network namespace.
func TestVlctlRunMigrate(t *testing.T) {
	needRoot(t)
	t.Parallel()
	root, records := workRoot(t), workRoot(t)
	manifest := testGuestText(t, "mover")
	const hello = `        echo "hello from user-data on $(uname -r)"` + "\n"
	if !strings.Contains(manifest, hello) {
		t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
	}
	manifest = strings.Replace(manifest, hello, hello+"        "+testguest.CounterScript+"\n", 1)
	// The masquerade interface forwards SSH, published on a free port.
	if !strings.Contains(manifest, "        - port: 80\n") {
		t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
	}
	manifest = strings.Replace(manifest, "        - port: 80\n", "        - port: 22\n", 1)
	port := strconv.Itoa(int(testenv.FreeAddr(t).Port()))
	file := filepath.Join(t.TempDir(), "mover.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []string {
		return append([]string{"run", "--emulation", "--workdir", root, "--record-dir", records}, args...)
	}
	cmd, out, errs, exited := startVlctl(t, run("--publish", port+":22", file)...)
	waitFor(t, "the guest's address", 4*time.Minute, exited, func() bool {
		return strings.Contains(errs.String(), "eth0 10.0.2.2") && strings.Contains(out.String(), "VL-COUNT-20")
	})
	sshBanner(t, port)
	first := onlyRecord(t, records)

	// A migration interrupted midway (Ctrl-C in the new run, the migration
	// capped at 1 MiB/s so that it is still under way): it is cancelled,
	// the guest counts on in its run, and the new run leaves nothing.
	stopTaking := takePort(port)
	ncmd, _, nerrs, nexited := startVlctl(t, run("--migrate-from", "mover", "--migration-bandwidth", "1Mi")...)
	waitFor(t, "the migration to start", 3*time.Minute, exited, func() bool {
		return strings.Contains(errs.String(), "vlctl: migrating the guest to the run of pid")
	})
	time.Sleep(2 * time.Second)
	if err := ncmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, "the interrupted run", ncmd, nexited, 2*time.Minute); code == 0 || !strings.Contains(nerrs.String(), "its guest runs on there") {
		t.Errorf("the interrupted run: exit %d, want non-zero, saying the guest runs on in its run:\n%s", code, nerrs.String())
	}
	if !strings.Contains(errs.String(), "the target run withdrew: cancelling the migration") {
		t.Errorf("the source does not say it cancelled the migration:\n%s", errs.String())
	}
	c := testguest.Counts(out.String())
	waitFor(t, "counts in the first run after the cancel", time.Minute, exited, func() bool {
		return strings.Contains(out.String(), "VL-COUNT-"+strconv.Itoa(c[len(c)-1]+20))
	})
	if now := onlyRecord(t, records); now.WorkDir != first.WorkDir {
		t.Errorf("after the cancel the VM's run is %s, want the first one (%s)", now.WorkDir, first.WorkDir)
	}
	// The first run kept its published port all along.
	sshBanner(t, port)
	if n := stopTaking(); n > 0 {
		t.Errorf("another user bound the published port %d times around the cancelled migration", n)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 1 {
		t.Errorf("the work root holds %d entries after the cancelled migration, want the first run's alone", len(ents))
	}

	for hop := 1; hop <= 2; hop++ {
		prev := onlyRecord(t, records)
		// Another local user's try at the published port, all through
		// the hand-over: the old run hands its listener to the new one.
		stopTaking := takePort(port)
		ncmd, nout, nerrs, nexited := startVlctl(t, run("--migrate-from", "mover")...)
		waitFor(t, "the migration", 3*time.Minute, nexited, func() bool { return strings.Contains(nerrs.String(), "vlctl: migrated in ") })
		if code := exitCode(t, "the old run", cmd, exited, time.Minute); code != 0 {
			t.Errorf("hop %d: the old run's exit status %d, want 0", hop, code)
		}
		if !strings.Contains(errs.String(), "guest migrated to another run; this one ends") {
			t.Errorf("hop %d: the old run does not say the guest went:\n%s", hop, errs.String())
		}
		last := testguest.Counts(out.String())
		if len(last) == 0 {
			t.Fatalf("hop %d: the old run's console has no count", hop)
		}
		waitFor(t, "counts in the new run", time.Minute, nexited, func() bool {
			return strings.Contains(nout.String(), "VL-COUNT-"+strconv.Itoa(last[len(last)-1]+20))
		})
		after := testguest.Counts(nout.String())
		if f, p := after[0], last[len(last)-1]; f > p+1 || f < p-1 {
			t.Errorf("hop %d: the new run's console begins at count %d; the old one's ended at %d", hop, f, p)
		}
		if strings.Contains(nout.String(), testguest.MarkerBooted) {
			t.Errorf("hop %d: the guest booted again in the new run", hop)
		}
		waitFor(t, "the guest agent's report in the new run", time.Minute, nexited, func() bool {
			return strings.Contains(nerrs.String(), "guest agent: ") && strings.Contains(nerrs.String(), "eth0 10.0.2.2")
		})
		for _, n := range prev.NetNS {
			if _, err := os.Stat(filepath.Join("/run/netns", n)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("hop %d: the old run's network namespace %s is left (%v)", hop, n, err)
			}
		}
		now := onlyRecord(t, records)
		if now.LauncherRoot != first.WorkDir {
			t.Errorf("hop %d: the new run's launcher sees its pod at %q, want the first run's work dir %s", hop, now.LauncherRoot, first.WorkDir)
		}
		if ents, err := os.ReadDir(first.WorkDir); err != nil || len(ents) != 0 {
			t.Errorf("hop %d: the first run's work dir: %d entries, %v; want it kept, empty", hop, len(ents), err)
		}
		// The published port now leads to the guest in the new pod.
		sshBanner(t, port)
		if n := stopTaking(); n > 0 {
			t.Errorf("hop %d: another user bound the published port %d times while the guest moved", hop, n)
		}
		t.Logf("hop %d: %s", hop, strings.TrimSpace(lineWith(nerrs.String(), "migrated in")))
		cmd, out, errs, exited = ncmd, nout, nerrs, nexited
	}
	last := onlyRecord(t, records)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, "the last run", cmd, exited, 2*time.Minute); code != 0 {
		t.Errorf("the last run's exit status %d, want 0", code)
	}
	for _, n := range last.NetNS {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("network namespace %s left (%v)", n, err)
		}
	}
	keepEnv{root: root, records: records}.checkNothingLeft(t)
}

// onlyRecord is the one live run recorded in records.
func onlyRecord(t *testing.T, records string) runrecord.Entry {
	t.Helper()
	entries, err := runrecord.List(records)
	if err != nil || len(entries) != 1 || entries[0].Stale {
		t.Fatalf("records: %+v, %v; want one live run", entries, err)
	}
	return entries[0]
}

// lineWith is the first line of s holding sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestGCMigratedRuns: vlctl gc after runs of a migrated VM were killed.
// A source run killed after it handed its guest over leaves its work dir,
// which the live run's launcher sees its pod at: gc empties it and keeps
// it. A target run killed with no live run of the VM left leaves its own
// work dir and the first run's: gc removes both.
func TestGCMigratedRuns(t *testing.T) {
	needRoot(t)
	root, records := workRoot(t), workRoot(t)
	pid, start, err := runrecord.Self()
	if err != nil {
		t.Fatal(err)
	}
	dir := func(name string, files ...string) string {
		d := filepath.Join(root, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	a, b := dir("a", "launcher.log"), dir("b", "launcher.log")
	c, a2 := dir("c", "launcher.log"), dir("a2")
	write := func(workDir, launcherRoot string, alive bool) {
		r := &runrecord.Record{Name: "m", Namespace: "default", Process: runrecord.Process{PID: pid, PIDStart: start},
			WorkDir: workDir, Takeover: runrecord.Takeover{LauncherRoot: launcherRoot}}
		if !alive {
			r.PIDStart++ // another process that had the pid: the run is gone
		}
		if _, err := runrecord.Write(records, r); err != nil {
			t.Fatal(err)
		}
	}
	write(a, "", false) // the source, killed after the hand-over
	write(b, a, true)   // the VM's live run
	write(c, a2, false) // another VM's last run, killed
	code, _, stderr := vlctl(t, time.Minute, "gc", "--record-dir", records, "--timeout", "5s")
	t.Logf("vlctl gc: exit %d:\n%s", code, stderr)
	if code != 0 {
		t.Errorf("vlctl gc: exit %d", code)
	}
	if ents, err := os.ReadDir(a); err != nil || len(ents) != 0 {
		t.Errorf("%s: %d entries, %v; want it kept, empty, for the live run's launcher", a, len(ents), err)
	}
	if _, err := os.Stat(filepath.Join(b, "launcher.log")); err != nil {
		t.Errorf("the live run's work dir was touched: %v", err)
	}
	for _, d := range []string{c, a2} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after vlctl gc (%v)", d, err)
		}
	}
	if entries, err := runrecord.List(records); err != nil || len(entries) != 1 || entries[0].WorkDir != b {
		t.Errorf("records after vlctl gc: %+v, %v; want the live run's alone", entries, err)
	}
}

// sshBanner reads the guest's SSH banner through the host's published
// port, trying for up to 30 s (a new run publishes the port once the old
// one has let it go).
func sshBanner(t *testing.T, port string) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 5*time.Second)
		if err != nil {
			last = err
			continue
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		banner, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err == nil && strings.HasPrefix(banner, "SSH-2.0-") {
			return
		}
		last = fmt.Errorf("read %q: %v", banner, err)
	}
	t.Fatalf("no SSH banner through 127.0.0.1:%s: %v", port, last)
}

// exitCode waits up to limit for the vlctl that startVlctl started (what)
// to end, and returns its exit status.
func exitCode(t *testing.T, what string, cmd *exec.Cmd, exited chan error, limit time.Duration) int {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(limit):
		t.Fatalf("%s did not end within %v", what, limit)
	}
	return cmd.ProcessState.ExitCode()
}

// TestVlctlRunMigrateStorage: a VM with the host's storage (hostDisk
// files, a --volume claim and dataVolume) and runStrategy Always moves to
// another run: the files are shared, not copied, the new run's QEMU reads
// and writes them (its own ACL entry; the old run's goes at its end), the
// old run ends without starting the guest again and the new run keeps the
// strategy; once the last run ended no ACL entry is left on any file.
func TestVlctlRunMigrateStorage(t *testing.T) {
	needRoot(t)
	t.Parallel()
	e := newKeepEnv(t)
	if err := os.WriteFile(filepath.Join(e.dir, "hd.img"), make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	// The guest writes (and flushes) a count to each of its four disks
	// of the user's, and says whether it could, every 0.2 s.
	const io = `            (i=0; while :; do ok=ok; for b in /sys/block/vd*; do case "$(cat $b/serial 2>/dev/null)" in p-*) printf 'IO-%08d' $i | dd of=/dev/${b##*/} bs=512 seek=8 conv=notrunc,fsync 2>/dev/null || ok=fail ;; esac; done; echo "VL-IO $i $ok"; i=$((i+1)); sleep 0.2; done) &` + "\n"
	// runStrategy Always: the old run must not start the guest again
	// when it leaves (it would run twice, on the same disks), and the new
	// run keeps the strategy.
	doc := strings.Replace(e.doc("Always", "s"), " "+testguest.OptPowerOff, "", 1)
	if !strings.HasSuffix(doc, "            sync\n") {
		t.Fatalf("keepVM changed shape:\n%s", doc)
	}
	doc += io
	file := e.write(t, "store", doc)
	cmd, out, errs, exited := startVlctl(t, e.run("--volume", "claim1="+filepath.Join(e.dir, "pvc.img")+",size=8Mi",
		"--volume", "dv1="+filepath.Join(e.dir, "dv.img"), file)...)
	waitFor(t, "disk writes in the first run", 4*time.Minute, exited, func() bool { return strings.Contains(out.String(), "VL-IO 10 ok") })
	first := onlyRecord(t, e.records)
	if len(first.Grants) != 4 || len(first.Volumes) != 2 {
		t.Fatalf("the first run's record: grants %d, volumes %v; want 4 and the two claims", len(first.Grants), first.Volumes)
	}

	ncmd, nout, nerrs, nexited := startVlctl(t, e.run("--migrate-from", "keep")...)
	waitFor(t, "the migration", 3*time.Minute, nexited, func() bool { return strings.Contains(nerrs.String(), "vlctl: migrated in ") })
	if code := exitCode(t, "the old run", cmd, exited, time.Minute); code != 0 {
		t.Errorf("the old run's exit status %d, want 0:\n%s", code, errs.String())
	}
	if strings.Contains(errs.String(), "starting the guest again") {
		t.Errorf("the old run started the guest again after it left:\n%s", errs.String())
	}
	if now := onlyRecord(t, e.records); now.VM == nil || now.VM.Spec.RunStrategy == nil || *now.VM.Spec.RunStrategy != "Always" {
		t.Errorf("the new run's record has VM %+v, want the VirtualMachine with runStrategy Always", now.VM)
	}
	if strings.Contains(out.String(), " fail") {
		t.Errorf("a disk write failed in the first run:\n%s", lineWith(out.String(), " fail"))
	}
	waitFor(t, "disk writes in the new run", time.Minute, nexited, func() bool { return strings.Count(nout.String(), "VL-IO ") >= 10 })
	if strings.Contains(nout.String(), " fail") || strings.Contains(nout.String(), testguest.MarkerBooted) {
		t.Errorf("in the new run a disk write failed or the guest booted again:\n%s", launchertest.Tail(nout.String(), 3000))
	}
	// What the guest wrote last is in the files themselves: shared, not
	// copies.
	n := lastIO(nout.String())
	for _, name := range []string{"hd.img", "hdnew.img", "pvc.img", "dv.img"} {
		b := make([]byte, 11)
		f, err := os.Open(filepath.Join(e.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		f.ReadAt(b, 8*512)
		f.Close()
		if got, _ := strconv.Atoi(strings.TrimPrefix(string(b), "IO-")); got < n-1 {
			t.Errorf("%s holds %q, want the guest's count of the new run (%d) or later", name, b, n)
		}
	}
	select {
	case err := <-nexited:
		t.Fatalf("the new run ended: %v", err)
	default:
	}
	ncmd.Process.Signal(os.Interrupt)
	if code := exitCode(t, "the new run", ncmd, nexited, 2*time.Minute); code != 0 {
		t.Errorf("the new run's exit status %d after Ctrl-C, want 0", code)
	}
	for _, g := range first.Grants {
		if _, err := unix.Getxattr(g.Path, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s: an ACL is left after both runs (%v)", g.Path, err)
		}
	}
	e.checkNothingLeft(t)
}

// lastIO is the last count the guest said it wrote.
func lastIO(console string) int {
	n := -1
	for _, l := range strings.Split(console, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "VL-IO" && f[2] == "ok" {
			n, _ = strconv.Atoi(f[1])
		}
	}
	return n
}
