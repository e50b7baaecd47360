package standalone_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

// gcID is an id of the test's own, above vlctl's default range and apart
// for each test process.
func gcID(n int) uint32 { return uint32(1879400000 + 4*(os.Getpid()%100000) + n) }

// deadRun is the record of a vlctl run killed with SIGKILL: a record whose
// pid has another start time, a work dir of root's, and the VM's id.
type deadRun struct {
	records, workDir, record string
	id                       uint32
}

func newDeadRun(t *testing.T, id uint32) *deadRun {
	t.Helper()
	testenv.Root(t, "processes run as the VM's id")
	_, start, err := runrecord.Self()
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	d := &deadRun{records: filepath.Join(top, "records"), workDir: filepath.Join(top, "vl", "ab12"), id: id}
	if err := os.MkdirAll(d.workDir, 0o700); err != nil {
		t.Fatal(err)
	}
	rec := &runrecord.Record{Name: "gc", Namespace: "default", Process: runrecord.Process{PID: os.Getpid(), PIDStart: start + 1},
		WorkDir: d.workDir, Cleanup: runrecord.Cleanup{UID: id}}
	if d.record, err = runrecord.Write(d.records, rec); err != nil {
		t.Fatal(err)
	}
	return d
}

// vmProcess starts what a VM's process that left its work dir looks like:
// running as id, its working directory and command line naming nothing
// of the run's.
// The channel is closed once it has ended.
func vmProcess(t *testing.T, id uint32) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return cmd, done
}

// TestGCEndsProcessesByUID: vlctl gc finds a dead run's processes by its
// leased id, not by its work dir: a VM process that changed directory
// (and names nothing of the run) is ended, then the record and the
// lease go.
func TestGCEndsProcessesByUID(t *testing.T) {
	id := gcID(0)
	d := newDeadRun(t, id)
	pool, err := uidpool.ForMachine(fmt.Sprintf("%d-%d", id, id))
	if err != nil {
		t.Fatal(err)
	}
	// The dead run's lease, as it left it: its holder gone, its record named.
	if err := pool.Claim(id, uidpool.Holder{PID: 1, PIDStart: 1, Record: d.record}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(uidpool.DefaultDir, fmt.Sprint(id))) })
	cmd, done := vmProcess(t, id)
	var status strings.Builder
	if err := standalone.GC(d.records, 2*time.Second, &status); err != nil {
		t.Fatalf("gc: %v\n%s", err, status.String())
	}
	t.Logf("gc:\n%s", status.String())
	select {
	case <-done:
		t.Logf("the VM's process ended: %v", cmd.ProcessState)
	case <-time.After(5 * time.Second):
		t.Fatal("the VM's process (its cwd /, its argv sleep 300) survived vlctl gc")
	}
	if _, err := os.Lstat(d.record); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after gc: %v", err)
	}
	if _, ok, err := pool.Holder(id); ok || err != nil {
		t.Errorf("the run's uid lease after gc: %v, %v", ok, err)
	}
	if _, err := os.Lstat(d.workDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir after gc: %v", err)
	}
}

// TestGCLeavesAnotherRunsUID: when the id a dead run's record names is
// leased to another run now (a record of an older vlctl, whose lease was
// swept), gc ends none of that id's processes: they are the other VM's. The
// record stays, naming why.
func TestGCLeavesAnotherRunsUID(t *testing.T) {
	id := gcID(1)
	d := newDeadRun(t, id)
	pool, err := uidpool.ForMachine(fmt.Sprintf("%d-%d", id, id))
	if err != nil {
		t.Fatal(err)
	}
	other, err := pool.Allocate() // this test process: a live run
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(uidpool.DefaultDir, fmt.Sprint(id))) })
	if err := other.SetRecord(filepath.Join(t.TempDir(), "other.json")); err != nil {
		t.Fatal(err)
	}
	_, done := vmProcess(t, id)
	var status strings.Builder
	err = standalone.GC(d.records, time.Second, &status)
	if err == nil || !strings.Contains(err.Error(), "leased to another run") {
		t.Errorf("gc: %v, want the record kept: its id is leased to another run\n%s", err, status.String())
	}
	select {
	case <-done:
		t.Fatal("gc ended a process of another run's id")
	case <-time.After(2 * time.Second):
	}
	if _, err := os.Lstat(d.record); err != nil {
		t.Errorf("record after a gc that could not end its processes: %v", err)
	}
}
