package domain

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// TestDumpTarget: the dump goes only to a file directly in a volume's
// directory below the hotplug disk directory (where virt-handler mounts a
// memory dump volume); anything else is refused naming dumpPath and why.
func TestDumpTarget(t *testing.T) {
	l := layout.Default()
	vol, file, err := dumpTarget(l, "/var/run/kubevirt/hotplug-disks/dumpvol/vm1-dumpvol-20260101-000000.memory.dump")
	if err != nil || vol != "dumpvol" || file != "vm1-dumpvol-20260101-000000.memory.dump" {
		t.Errorf("virt-handler's path: %q %q %v", vol, file, err)
	}
	for _, tc := range []struct{ path, why string }{
		{"", "must be set"},
		{"dumpvol/x.memory.dump", "absolute"},
		{"/var/run/kubevirt/hotplug-disks/dumpvol/../x.memory.dump", "absolute"},
		{"/var/run/kubevirt/hotplug-disks/x.memory.dump", "volume's directory"},
		{"/var/run/kubevirt/hotplug-disks/dumpvol", "volume's directory"},
		{"/var/run/kubevirt/hotplug-disks/a/b/x.memory.dump", "volume's directory"},
		{"/etc/x.memory.dump", "volume's directory"},
		{"/var/run/kubevirt/hotplug-disks-other/v/x", "volume's directory"},
	} {
		_, _, err := dumpTarget(l, tc.path)
		if err == nil || !strings.Contains(err.Error(), "dumpPath") || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %v, want an error naming dumpPath and %q", tc.path, err, tc.why)
		}
	}
}

// TestStartDump is KubeVirt's answer to virt-handler calling again on
// every reconcile: nothing while a dump runs (whatever the file) or when
// the last dump was to the same file, running or ended; a new file after
// the last one ended starts a new record.
func TestStartDump(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	t0 := metav1.NewTime(now.Add(-time.Minute))
	running := &domainjson.MemoryDumpMetadata{FileName: "a.memory.dump", StartTimestamp: &t0}
	ended := &domainjson.MemoryDumpMetadata{FileName: "a.memory.dump", StartTimestamp: &t0, EndTimestamp: &t0, Completed: true}
	for _, tc := range []struct {
		name    string
		last    *domainjson.MemoryDumpMetadata
		running bool
		file    string
		start   bool
	}{
		{"the first dump starts", nil, false, "a.memory.dump", true},
		{"the same file while it runs: nothing", running, true, "a.memory.dump", false},
		{"another file while one runs: nothing", running, true, "b.memory.dump", false},
		{"the same file after it ended: nothing", ended, false, "a.memory.dump", false},
		{"another file after the last ended starts", ended, false, "b.memory.dump", true},
	} {
		next, start := startDump(tc.last, tc.running, tc.file, now)
		if start != tc.start {
			t.Errorf("%s: start %v", tc.name, start)
			continue
		}
		if !start {
			if next != tc.last {
				t.Errorf("%s: record changed to %+v", tc.name, next)
			}
			continue
		}
		if next.FileName != tc.file || next.StartTimestamp == nil || !next.StartTimestamp.Time.Equal(now) ||
			next.EndTimestamp != nil || next.Completed || next.Failed || next.FailureReason != "" {
			t.Errorf("%s: new record %+v", tc.name, next)
		}
	}
}

// TestEndDump: a completed dump is Completed with its end; a failed one
// is Completed and Failed with KubeVirt's reason prefix; a record that
// already ended (its deadline passed) or is of another file is kept.
func TestEndDump(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	t0 := metav1.NewTime(now.Add(-time.Minute))
	cur := &domainjson.MemoryDumpMetadata{FileName: "a.memory.dump", StartTimestamp: &t0}
	ok := endDump(cur, "a.memory.dump", nil, now)
	if !ok.Completed || ok.Failed || ok.EndTimestamp == nil || !ok.EndTimestamp.Time.Equal(now) || ok.FailureReason != "" || cur.Completed {
		t.Errorf("completed: %+v (was %+v)", ok, cur)
	}
	bad := endDump(cur, "a.memory.dump", errors.New("cannot open file: Permission denied"), now)
	if !bad.Completed || !bad.Failed || bad.FailureReason != "Domain memory dump failed: cannot open file: Permission denied" {
		t.Errorf("failed: %+v", bad)
	}
	if again := endDump(bad, "a.memory.dump", nil, now.Add(time.Hour)); again != bad {
		t.Errorf("an ended record changed: %+v", again)
	}
	if other := endDump(cur, "b.memory.dump", nil, now); other != cur {
		t.Errorf("another file's end changed the record: %+v", other)
	}
	if endDump(nil, "a.memory.dump", nil, now) != nil {
		t.Errorf("an end without a record made one")
	}
}

// TestDumpDeadline: a fixed margin plus the memory at the slowest rate
// expected.
func TestDumpDeadline(t *testing.T) {
	if got := dumpDeadline(0); got != 15*time.Minute {
		t.Errorf("no memory: %v", got)
	}
	if got := dumpDeadline(64 << 30); got != 15*time.Minute+8192*time.Second {
		t.Errorf("64 GiB: %v", got)
	}
}
