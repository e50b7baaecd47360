package integration

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestMemoryDump drives VirtualMachineMemoryDump as virt-handler does for a
// memory dump volume (the volume in the VMI, its directory mounted below
// the pod's hotplug-disks, the call repeated on every reconcile until the
// Domain's metadata shows the end):
//   - a dump into a FIFO the test holds unread runs as long as the test
//     wants: meanwhile the same call and one for another file answer
//     success and change nothing, and GetDomainStats, Ping, GetDomain and
//     Sync answer at once; once read, the dump is an ELF core that readelf
//     reads, recorded completed in GetDomain and in a notify event, and
//     asking for it again changes nothing;
//   - a dump to virt-handler's file name is a regular ELF core file, and
//     the dumps an earlier request left in the volume are gone;
//   - a dump into a directory the launcher cannot write is recorded as
//     failed, saying why, and the guest runs on;
//   - a dumpPath outside the hotplug volumes is refused naming dumpPath;
//   - a Kill while a dump runs destroys the guest at once, and the dump
//     is recorded failed.
func TestMemoryDump(t *testing.T) {
	testenv.Programs(t, "readelf", "mkfifo")
	t.Parallel()
	p := env.New(t, "memdump", podOpts{SharedCaps: true})
	events := startNotify(t, p)
	p.WaitReady(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("memdump-1")
	v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "dumpvol", VolumeSource: v1.VolumeSource{
		MemoryDump: &v1.MemoryDumpVolumeSource{PersistentVolumeClaimVolumeSource: v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "dump-pvc"}, Hotpluggable: true}}}})
	launchertest.Must(t, c.Sync(ctx, v, nil))
	p.WaitConsole(testguest.MarkerReady, bootTimeout)

	volDir := filepath.Join(p.Layout.HotplugDiskDir, "dumpvol")
	podDir(t, volDir, true)

	// The dump runs for as long as nobody reads the FIFO.
	fifo := filepath.Join(volDir, "slow.core")
	reader := heldDump(t, ctx, c, v, fifo)
	defer reader.Close()
	start := dumpRecord(t, ctx, c)
	if start == nil || start.FileName != "slow.core" || start.StartTimestamp == nil || start.EndTimestamp != nil || start.Completed {
		t.Fatalf("metadata while the dump runs: %+v", start)
	}
	// libvirt pauses the guest for the dump (KubeVirt's flags ask for no
	// live dump), and virt-handler hears of it.
	waitEvent(t, events, 0, "Paused/Dump", func(e notifytest.Event) bool {
		return e.Domain.Status.Status == "Paused" && e.Domain.Status.Reason == "Dump"
	})

	// virt-handler's next reconciles: the same call, then one for another
	// file (a newer request) while this one runs.
	launchertest.Must(t, c.MemoryDump(ctx, v, fifo))
	other := filepath.Join(volDir, "other.memory.dump")
	launchertest.Must(t, c.MemoryDump(ctx, v, other))
	if again := dumpRecord(t, ctx, c); again == nil || again.FileName != "slow.core" || again.EndTimestamp != nil || !again.StartTimestamp.Equal(start.StartTimestamp) {
		t.Errorf("a call while the dump runs changed the record: %+v, was %+v", again, start)
	}
	answersDuringDump(t, ctx, c, v)

	// Read the dump out: it completes.
	got := filepath.Join(t.TempDir(), "slow.core")
	out, err := os.Create(got)
	launchertest.Must(t, err)
	n, err := io.Copy(out, reader)
	launchertest.Must(t, err)
	launchertest.Must(t, out.Close())
	done := waitDumpEnd(t, ctx, c, "slow.core")
	if done.Failed || !done.Completed || done.FailureReason != "" {
		t.Fatalf("dump into the FIFO: %+v", done)
	}
	t.Logf("dump of %d bytes, %v..%v", n, done.StartTimestamp, done.EndTimestamp)
	checkELFCore(t, got)
	waitStatus(t, ctx, c, "Running", "Unknown")
	waitEvent(t, events, 0, "with the dump completed", func(e notifytest.Event) bool {
		md := e.Domain.Spec.Metadata.KubeVirt.MemoryDump
		return md != nil && md.FileName == "slow.core" && md.Completed && md.EndTimestamp != nil
	})
	if _, err := os.Stat(other); err == nil {
		t.Errorf("the call for %s while a dump ran made a dump", other)
	}
	launchertest.Must(t, c.MemoryDump(ctx, v, fifo))
	time.Sleep(time.Second)
	if after := dumpRecord(t, ctx, c); after == nil || !after.EndTimestamp.Equal(done.EndTimestamp) || after.Failed {
		t.Errorf("asking again for the completed dump changed the record: %+v, was %+v", after, done)
	}

	// virt-handler's own file name; the dumps earlier requests left go,
	// other files stay.
	stale := filepath.Join(volDir, "memdump-dumpvol-20261206-000000.memory.dump")
	keep := filepath.Join(volDir, "keep.txt")
	for _, f := range []string{stale, keep} {
		launchertest.Must(t, os.WriteFile(f, []byte("x"), 0o644))
	}
	name := "memdump-dumpvol-20261207-070000.memory.dump"
	launchertest.Must(t, c.MemoryDump(ctx, v, filepath.Join(volDir, name)))
	if md := waitDumpEnd(t, ctx, c, name); md.Failed {
		t.Fatalf("dump to %s: %+v", name, md)
	}
	checkELFCore(t, filepath.Join(volDir, name))
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("the earlier dump %s was left in the volume", stale)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file that is no dump was removed: %v", err)
	}

	// A volume directory the launcher's user cannot write.
	roDir := filepath.Join(p.Layout.HotplugDiskDir, "rovol")
	podDir(t, roDir, false)
	launchertest.Must(t, c.MemoryDump(ctx, v, filepath.Join(roDir, "ro.memory.dump")))
	failed := waitDumpEnd(t, ctx, c, "ro.memory.dump")
	if !failed.Failed || !strings.HasPrefix(failed.FailureReason, "Domain memory dump failed: ") || !strings.Contains(failed.FailureReason, "ro.memory.dump") {
		t.Errorf("dump into a read-only directory: %+v, want failed naming the file", failed)
	}
	t.Logf("failure recorded: %s", failed.FailureReason)
	waitStatus(t, ctx, c, "Running", "Unknown")

	err = c.MemoryDump(ctx, v, "/etc/x.memory.dump")
	if err == nil || !strings.Contains(err.Error(), "dumpPath") {
		t.Errorf("dump outside the hotplug volumes: %v, want refused naming dumpPath", err)
	}
	if md := dumpRecord(t, ctx, c); md == nil || md.FileName != "ro.memory.dump" {
		t.Errorf("a refused call changed the record: %+v", md)
	}

	// A Kill while a dump runs destroys the guest at once (libvirt lets a
	// destroy through its dump job; the launcher's last resort, killing
	// QEMU itself, would wait 8 s first), and the dump is recorded failed.
	held := heldDump(t, ctx, c, v, filepath.Join(volDir, "killed.core"))
	defer held.Close()
	t0 := time.Now()
	if err := c.Kill(ctx, v); err != nil && !cmdclient.IsDisconnected(err) {
		t.Fatalf("Kill during a dump: %v", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("Kill during a dump took %v", took)
	}
	// libvirt writes into a FIFO through its I/O helper, whose dump call
	// returns only once the helper has written what it holds: let it.
	go io.Copy(io.Discard, held)
	if md := waitDumpEnd(t, ctx, c, "killed.core"); !md.Failed {
		t.Errorf("dump cut by a Kill: %+v, want failed", md)
	} else {
		t.Logf("Kill during the dump: %v; dump recorded: %s", time.Since(t0), md.FailureReason)
	}
	if strings.Contains(p.Stderr.String(), "killing QEMU") {
		t.Errorf("the launcher killed QEMU itself: the daemon did not destroy the domain during the dump")
	}
}

// heldDump starts a dump into a FIFO at path and returns its reading end
// once the daemon has opened the other: the dump runs until it is read.
func heldDump(t *testing.T, ctx context.Context, c *cmdclient.Client, v *v1.VirtualMachineInstance, path string) *os.File {
	t.Helper()
	launchertest.Must(t, syscall.Mkfifo(path, 0o600))
	launchertest.Must(t, os.Chown(path, int(env.Cred.Uid), int(env.Cred.Gid)))
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.Open(path) // until the daemon opens it to write
		if err != nil {
			t.Errorf("open the FIFO: %v", err)
		}
		opened <- f
	}()
	launchertest.Must(t, c.MemoryDump(ctx, v, path))
	select {
	case f := <-opened:
		if f == nil {
			t.FailNow()
		}
		return f
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not open the dump file within 30 s")
		return nil
	}
}

// podDir makes a volume directory as virt-handler's mount leaves it:
// the pod's user's (writable) or root's (not writable by the pod).
func podDir(t *testing.T, dir string, writable bool) {
	t.Helper()
	launchertest.Must(t, os.Mkdir(dir, 0o755))
	if writable {
		launchertest.Must(t, os.Chown(dir, int(env.Cred.Uid), int(env.Cred.Gid)))
	}
}

// answersDuringDump: the RPCs virt-handler keeps calling answer within
// their short deadlines while a dump runs, Sync included.
func answersDuringDump(t *testing.T, ctx context.Context, c *cmdclient.Client, v *v1.VirtualMachineInstance) {
	t.Helper()
	for name, call := range map[string]func(context.Context) error{
		"GetDomainStats": func(ctx context.Context) error { _, err := c.GetDomainStats(ctx); return err },
		"Ping":           c.Ping,
		"GetDomain":      func(ctx context.Context) error { _, _, err := c.GetDomain(ctx); return err },
		"Sync":           func(ctx context.Context) error { return c.Sync(ctx, v, nil) },
	} {
		cctx, cancel := context.WithTimeout(ctx, cmdclient.ShortTimeout)
		t0 := time.Now()
		err := call(cctx)
		cancel()
		if err != nil {
			t.Errorf("%s during the dump: %v", name, err)
			continue
		}
		t.Logf("%s during the dump: %v", name, time.Since(t0))
	}
}

// dumpRecord is the Domain's memory dump metadata.
func dumpRecord(t *testing.T, ctx context.Context, c *cmdclient.Client) *domainjson.MemoryDumpMetadata {
	t.Helper()
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain: exists %v, %v", exists, err)
	}
	return d.Spec.Metadata.KubeVirt.MemoryDump
}

// waitDumpEnd polls the Domain, as virt-handler reads it, until the dump
// to file has ended.
func waitDumpEnd(t *testing.T, ctx context.Context, c *cmdclient.Client, file string) *domainjson.MemoryDumpMetadata {
	t.Helper()
	var md *domainjson.MemoryDumpMetadata
	launchertest.Eventually(t, "the end of the dump to "+file, 2*time.Minute, 100*time.Millisecond, func() (bool, any) {
		md = dumpRecord(t, ctx, c)
		return md != nil && md.FileName == file && md.EndTimestamp != nil, md
	})
	if !md.Completed {
		t.Errorf("dump %s ended without Completed: %+v", file, md)
	}
	return md
}

// checkELFCore: readelf reads the file as an ELF core with the notes a
// memory-only dump of an x86 guest carries (a register set per vCPU).
func checkELFCore(t *testing.T, path string) {
	t.Helper()
	for _, tc := range []struct{ flag, want string }{{"-h", "CORE (Core file)"}, {"-n", "NT_PRSTATUS"}} {
		out, err := exec.Command("readelf", tc.flag, path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("readelf %s %s: %v, want %q in:\n%s", tc.flag, path, err, tc.want, launchertest.Tail(string(out), 20))
		}
	}
}
