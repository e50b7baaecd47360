package domain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// TestRestoreState is what a launcher taking over a pod's guest makes of
// the state its predecessor left.
func TestRestoreState(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-time.Minute))
	ended := metav1.NewTime(now.Add(-30 * time.Second))
	thaw := now.Add(time.Minute)
	for _, tc := range []struct {
		name    string
		state   State
		uid     string
		wantErr string
		check   func(t *testing.T, md domainjson.Metadata, thawAt *time.Time)
	}{
		{name: "the metadata and the pending thaw are taken over", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", GracePeriodSeconds: 45}, ThawAt: &thaw},
			check: func(t *testing.T, md domainjson.Metadata, thawAt *time.Time) {
				if md.GracePeriodSeconds != 45 || thawAt == nil || !thawAt.Equal(thaw) {
					t.Errorf("got %+v, thaw at %v", md, thawAt)
				}
			}},
		{name: "a migration under way is over: failed, ended, saying why", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", Migration: &domainjson.MigrationMetadata{UID: "m1", StartTimestamp: &started}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				m := md.Migration
				if m == nil || !m.Failed || m.EndTimestamp == nil || !strings.Contains(m.FailureReason, "launcher") {
					t.Errorf("migration %+v, want failed and ended", m)
				}
			}},
		{name: "a migration being aborted is over too", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", Migration: &domainjson.MigrationMetadata{UID: "m1", StartTimestamp: &started, AbortStatus: string(v1.MigrationAbortInProgress)}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				m := md.Migration
				if m == nil || !m.Failed || m.EndTimestamp == nil || m.AbortStatus != string(v1.MigrationAbortFailed) {
					t.Errorf("migration %+v, want failed, ended, abort failed", m)
				}
			}},
		{name: "a migration that ended keeps its outcome", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", Migration: &domainjson.MigrationMetadata{UID: "m1", StartTimestamp: &started, EndTimestamp: &ended}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				if m := md.Migration; m == nil || m.Failed || !m.EndTimestamp.Equal(&ended) {
					t.Errorf("migration %+v, want the succeeded one as it was", m)
				}
			}},
		{name: "a memory dump under way is over: completed, failed, saying why", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", MemoryDump: &domainjson.MemoryDumpMetadata{FileName: "d.memory.dump", StartTimestamp: &started}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				d := md.MemoryDump
				if d == nil || !d.Completed || !d.Failed || d.EndTimestamp == nil || !strings.Contains(d.FailureReason, "launcher") {
					t.Errorf("memory dump %+v, want completed, failed and ended", d)
				}
			}},
		{name: "a memory dump that ended keeps its outcome", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", MemoryDump: &domainjson.MemoryDumpMetadata{FileName: "d.memory.dump", StartTimestamp: &started, EndTimestamp: &ended, Completed: true}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				if d := md.MemoryDump; d == nil || d.Failed || !d.Completed || !d.EndTimestamp.Equal(&ended) {
					t.Errorf("memory dump %+v, want the completed one as it was", d)
				}
			}},
		{name: "a backup under way is over: completed, failed, saying why", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", Backup: &domainjson.BackupMetadata{Name: "b", Mode: "Pull", StartTimestamp: &started}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				b := md.Backup
				if b == nil || !b.Completed || !b.Failed || b.EndTimestamp == nil || !strings.Contains(b.BackupMsg, "launcher") {
					t.Errorf("backup %+v, want completed, failed and ended", b)
				}
			}},
		{name: "a backup that ended keeps its outcome", uid: "u1",
			state: State{Metadata: domainjson.Metadata{UID: "u1", Backup: &domainjson.BackupMetadata{Name: "b", StartTimestamp: &started, EndTimestamp: &ended, Completed: true}}},
			check: func(t *testing.T, md domainjson.Metadata, _ *time.Time) {
				if b := md.Backup; b == nil || b.Failed || !b.Completed || !b.EndTimestamp.Equal(&ended) {
					t.Errorf("backup %+v, want the completed one as it was", b)
				}
			}},
		{name: "the state of another VMI is refused", uid: "u2",
			state:   State{Metadata: domainjson.Metadata{UID: "u1"}},
			wantErr: "uid u1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md, thawAt, err := restoreState(tc.state, tc.uid, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, md, thawAt)
		})
	}
}

// TestStateFile: a manager writes its state to the file, and the next
// manager of the pod (a launcher taking over) starts from it.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateFileName)
	if _, ok, err := LoadState(path); ok || err != nil {
		t.Fatalf("no file: ok %v, err %v; want neither", ok, err)
	}
	hostUUID := "6f1c2e0a-2f57-4d8e-9a41-0b9d7c3e5a10"
	started := metav1.NewTime(time.Now().Add(-time.Minute))
	m := New(Config{StateConfig: StateConfig{StateFile: path, HostUUID: hostUUID}, Identity: Identity{UID: "u1"}})
	m.md.GracePeriodSeconds = 45
	m.md.Migration = &domainjson.MigrationMetadata{UID: "m1", StartTimestamp: &started}
	m.targetOf = "m1"
	m.persist.saveState()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode().Perm())
	}
	s, ok, err := LoadState(path)
	if !ok || err != nil || s.HostUUID != hostUUID || s.Metadata.GracePeriodSeconds != 45 {
		t.Fatalf("read back ok %v, err %v: %+v", ok, err, s)
	}

	next := New(Config{StateConfig: StateConfig{StateFile: path, HostUUID: hostUUID}, Identity: Identity{UID: "u1"}})
	if next.md.GracePeriodSeconds != 45 || next.md.UID != "u1" {
		t.Errorf("the next manager's metadata %+v, want the saved one", next.md)
	}
	if mig := next.md.Migration; mig == nil || !mig.Failed || mig.EndTimestamp == nil {
		t.Errorf("the next manager's migration %+v, want it failed and ended", mig)
	}
	// A pod prepared as a migration target stays one: no Sync defines a
	// domain of its own there.
	if !next.mig.awaitingMigration() {
		t.Error("the next manager of a migration target does not know it is one")
	}

	other := New(Config{StateConfig: StateConfig{StateFile: path}, Identity: Identity{UID: "u2"}})
	if other.md.GracePeriodSeconds == 45 || other.md.UID != "u2" {
		t.Errorf("a manager of another VMI took the state over: %+v", other.md)
	}

	// A link at the file's name is refused, never followed.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadState(link); err == nil {
		t.Error("a state file that is a link was read")
	}
}

// TestDropState: a launcher that ends by itself removes its state file,
// and a refresh finishing after that does not write it again.
func TestDropState(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFileName)
	m := New(Config{StateConfig: StateConfig{StateFile: path}, Identity: Identity{UID: "u1"}})
	m.md.GracePeriodSeconds = 45
	m.persist.saveState()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	m.DropState()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("state file after DropState: %v, want it gone", err)
	}
	m.md.GracePeriodSeconds = 30
	m.persist.saveState()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("state file written again after DropState: %v", err)
	}
	m.DropState() // again: nothing to remove, no complaint
}
