package runrecord

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func TestMatch(t *testing.T) {
	entries := []Entry{
		{Record: Record{Name: "web", Namespace: "default", Process: Process{PID: 10}}, Path: "/r/10.json"},
		{Record: Record{Name: "web", Namespace: "prod", Process: Process{PID: 11}}, Path: "/r/11.json"},
		{Record: Record{Name: "db", Namespace: "default", Process: Process{PID: 12}}, Path: "/r/12.json"},
		{Record: Record{Name: "old", Namespace: "default", Process: Process{PID: 13}}, Path: "/r/13.json", Stale: true},
		{Record: Record{Name: "db", Namespace: "prod", Process: Process{PID: 14}}, Path: "/r/14.json", Stale: true},
		{Record: Record{Name: "twice", Namespace: "a", Process: Process{PID: 15}}, Path: "/r/15.json"},
		{Record: Record{Name: "twice", Namespace: "a", Process: Process{PID: 16}}, Path: "/r/16.json"},
	}
	cases := []struct {
		query, ns string
		pid       int    // the match
		err       string // or an error containing this
	}{
		{query: "db", pid: 12}, // the stale prod/db does not make it ambiguous
		{query: "default/web", pid: 10},
		{query: "web", ns: "prod", pid: 11},
		{query: "prod/web", ns: "prod", pid: 11},
		{query: "web", err: `"web" is ambiguous: default/web (pid 10), prod/web (pid 11)`},
		{query: "prod/web", ns: "default", err: "--namespace says default"},
		{query: "old", err: "pid 13) is gone; the stale record /r/13.json is not acted on"},
		{query: "prod/db", err: "stale record /r/14.json"},
		{query: "db", ns: "prod", err: "stale record"},
		{query: "nope", err: `no running VM named "nope"`},
		{query: "web", ns: "staging", err: "no running VM"},
		{query: "a/b/c", err: "give NAME or NAMESPACE/NAME"},
		{query: "default/", err: "give NAME or NAMESPACE/NAME"},
		{query: "a/twice", err: "2 runs of this VM"},
	}
	for _, c := range cases {
		t.Run(c.query+"@"+c.ns, func(t *testing.T) {
			got, err := Match(entries, c.query, c.ns)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Match(%q, %q) = %v, %v; want error with %q", c.query, c.ns, got, err, c.err)
				}
				return
			}
			if err != nil || got.PID != c.pid {
				t.Fatalf("Match(%q, %q) = %+v, %v; want pid %d", c.query, c.ns, got, err, c.pid)
			}
		})
	}
}

// TestWriteList: a record written is read back with its fields, marked
// live for this process and stale for a process that is gone, and files
// not written the way Write does are not taken.
func TestWriteList(t *testing.T) {
	testenv.Root(t, "records are root's")
	dir := filepath.Join(t.TempDir(), "records")
	pid, start, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	live := &Record{Name: "vm", Namespace: "ns", Process: Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/ab12",
		Sockets: Sockets{Socket: "/run/vl/ab12/s"}, Endpoints: Endpoints{Addresses: []Address{{IP: "192.168.67.2", NetNS: "vlout-x"}}}, Started: time.Now().UTC().Truncate(time.Second)}
	path, err := Write(dir, live)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("record mode: %v %v, want 0600", st.Mode(), err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("record directory mode: %v %v, want 0700", st.Mode(), err)
	}
	// A process that is gone, and this one with another start time (a
	// reused pid).
	sh := exec.Command("true")
	if err := sh.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, &Record{Name: "gone", Namespace: "ns", Process: Process{PID: sh.Process.Pid, PIDStart: start}, WorkDir: "/run/vl/cd34"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, &Record{Name: "reused", Namespace: "ns", Process: Process{PID: pid, PIDStart: start + 1}, WorkDir: "/run/vl/ef56"}); err != nil {
		t.Fatal(err)
	}
	// Not taken: a record others may write, a symlink.
	if err := os.WriteFile(filepath.Join(dir, "w.json"), []byte(`{"name":"w","pid":1}`), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "w.json"), 0o666)
	if err := os.Symlink(path, filepath.Join(dir, "l.json")); err != nil {
		t.Fatal(err)
	}
	got, err := List(dir)
	if err == nil || !strings.Contains(err.Error(), "w.json") || !strings.Contains(err.Error(), "l.json") {
		t.Errorf("List error %v, want the two bad files named", err)
	}
	state := map[string]bool{}
	for _, e := range got {
		state[e.Name] = e.Stale
	}
	if len(got) != 3 || state["vm"] || !state["gone"] || !state["reused"] {
		t.Fatalf("List = %+v", got)
	}
	if g := got[2]; g.Name != "vm" || g.Socket != live.Socket || !g.Started.Equal(live.Started) || len(g.Addresses) != 1 || g.Addresses[0] != live.Addresses[0] {
		t.Errorf("read back %+v, want %+v", g.Record, *live)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	// A record directory others can write is refused.
	os.Chmod(dir, 0o777)
	if _, err := List(dir); err == nil || !strings.Contains(err.Error(), "writable by users other than its owner") {
		t.Errorf("List of a world-writable directory: %v", err)
	}
	if _, err := Write(dir, live); err == nil {
		t.Error("Write into a world-writable directory succeeded")
	}
}

func TestListMissingDir(t *testing.T) {
	got, err := List(filepath.Join(t.TempDir(), "none"))
	if err != nil || len(got) != 0 {
		t.Errorf("List of a missing dir = %v, %v", got, err)
	}
}

// TestRecordsPrivate: records hold the whole VMI, cloud-init passwords
// included. They are 0600 in a 0700 directory: an existing directory of
// root's that others can read is closed first, one of another user's is
// refused, and a record is replaced atomically (a link at its name is
// replaced, never written through).
func TestRecordsPrivate(t *testing.T) {
	testenv.Root(t, "records are root's")
	pid, start, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Name: "vm", Namespace: "ns", Process: Process{PID: pid, PIDStart: start}, WorkDir: "/run/vl/ab12"}

	t.Run("open directory closed", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "records")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o755)
		path, err := Write(dir, rec)
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
			if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
				t.Errorf("%s: mode %v %v, want %04o", p, st.Mode(), err, want)
			}
		}
	})
	t.Run("another user's directory refused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "records")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 1879300003, 1879300003); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, rec); err == nil || !strings.Contains(err.Error(), dir+" is owned by uid 1879300003, not root") {
			t.Fatalf("Write into another user's directory: %v, want it refused naming it", err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("written into the refused directory: %v", ents)
		}
		if _, err := List(dir); err == nil || !strings.Contains(err.Error(), "owned by uid 1879300003") {
			t.Errorf("List of another user's directory: %v, want it refused", err)
		}
	})
	t.Run("link at the record's name replaced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "records")
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, []byte("root's own\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		path, err := Write(dir, rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, path); err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, rec); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != "root's own\n" {
			t.Errorf("written through the link: %q", b)
		}
		if st, err := os.Lstat(path); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want a regular file 0600", path, st.Mode(), err)
		}
	})
}

// TestMatchBackgroundQuery: a background run is named as a live run is,
// and a namespace in the query that --namespace contradicts is refused
// (before, the query's namespace silently won).
func TestMatchBackgroundQuery(t *testing.T) {
	runs := []Background{{BackgroundState: BackgroundState{Namespace: "default", Name: "vm"}}}
	if b, err := MatchBackground(runs, "default/vm", ""); err != nil || b == nil {
		t.Errorf("default/vm: %v, %v", b, err)
	}
	if b, err := MatchBackground(runs, "vm", "other"); err != nil || b != nil {
		t.Errorf("vm in other: %v, %v; want none", b, err)
	}
	if _, err := MatchBackground(runs, "default/vm", "other"); err == nil || !strings.Contains(err.Error(), "--namespace says other") {
		t.Errorf("contradicting --namespace: %v", err)
	}
	if _, err := MatchBackground(runs, "default/", ""); err == nil {
		t.Error("an empty name was taken")
	}
}
