package reliability

// Fixed paths root uses on every run: the test guest cache (in /var/tmp,
// where any user may make the name first), the run records (they hold the
// whole VMI, cloud-init passwords included) and the machine's uid lease
// table. Root makes them, checks owner and mode every time it opens them,
// and refuses anything another user made or can change; records are
// private; one lease table serves every record directory.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

// stickyTemp is a /var/tmp stand-in in the test's own tree: root's,
// sticky and world-writable.
func stickyTemp(t *testing.T) string {
	t.Helper()
	d := filepath.Join(testenv.OpenDir(t), "var-tmp")
	if err := errors.Join(os.Mkdir(d, 0o700), syscall.Chmod(d, 0o1777)); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPathsTestGuestCache: `vlctl testguest` (what make demo, test and e2e
// build the guest with) refuses a cache directory another user made first
// and one that is a symbolic link, naming it and the fix, and writes
// nothing into it or through it.
func TestPathsTestGuestCache(t *testing.T) {
	u := needLinkUser(t)
	env.NeedBinaries(t)
	cases := []struct {
		name  string
		plant func(t *testing.T, cache string, c *canary)
		want  string
	}{
		{"another user's", func(t *testing.T, cache string, c *canary) {
			if err := errors.Join(os.Mkdir(cache, 0o755), os.Chown(cache, u.uid, u.gid)); err != nil {
				t.Fatal(err)
			}
		}, fmt.Sprintf("is owned by uid %d, not root", u.uid)},
		{"a link", func(t *testing.T, cache string, c *canary) {
			if err := os.Symlink(c.dir, cache); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(cache, u.uid, u.gid); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCanary(t)
			tmp := stickyTemp(t)
			cache := filepath.Join(tmp, "virtlauncher-testguest")
			tc.plant(t, cache, c)
			tree := &canary{dir: tmp}
			tree.before = tree.state(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, filepath.Join(env.BinDir, "vlctl"), "testguest", "--cache-dir", cache).CombinedOutput()
			if err == nil {
				t.Fatalf("vlctl testguest into %s (%s) succeeded:\n%s", cache, tc.name, out)
			}
			if msg := string(out); !strings.Contains(msg, cache+" "+tc.want) || !strings.Contains(msg, "remove") {
				t.Errorf("vlctl testguest: %v\n%s\nwant the cache dir named: %q, and the fix", err, msg, tc.want)
			}
			tree.untouched(t)
			c.untouched(t)
		})
	}
}

// recordsMonitor is the VM's side of TestPathsRecordsPrivate: as the
// VM's id, it tries to list and read the run records, then waits for the
// test to look at the records and lease while the run is alive.
const recordsMonitor = `#!/bin/sh
out='@OUT@'; rec='@REC@'
note() { echo "$*" >>"$out/notes"; }
note "uid $(id -u)"
if ls "$rec" >/dev/null 2>&1; then note "listed records"; else note "denied records"; fi
if cat "$rec"/*.json >/dev/null 2>&1; then note "read a record"; else note "denied record"; fi
note started
i=0
while [ ! -e "$out/go" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
exit 3
`

// waitNote waits until the monitor's notes hold line.
func waitNote(t *testing.T, notes, line string, timeout time.Duration) string {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(notes)
		if strings.Contains(string(b), line+"\n") {
			return string(b)
		}
	}
	t.Fatalf("the monitor did not note %q within %v", line, timeout)
	return ""
}

// leasePath is the id's lease in the machine's table.
func leasePath(id int) string {
	return filepath.Join(uidpool.DefaultDir, strconv.Itoa(id))
}

// TestPathsRecordsPrivate: while a run is alive, its record is root's,
// 0600, in a 0700 directory (an existing 0755 one is closed), the VM's id
// can neither list nor read it, and the run's lease in the machine's table
// names the record. Both are gone at the end; nothing outside the test's
// tree is touched.
func TestPathsRecordsPrivate(t *testing.T) {
	u := needLinkUser(t)
	c := newCanary(t)
	out := userDir(t, u)
	records := testenv.OpenDir(t) // 0755, as an older vlctl made it
	script := strings.NewReplacer("@OUT@", out, "@REC@", records).Replace(recordsMonitor)
	l := newLinkRun(t, u, script)
	type result struct {
		status string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		s, err := l.runWith(records, nil)
		done <- result{s, err}
	}()
	notes := waitNote(t, filepath.Join(out, "notes"), "started", 90*time.Second)
	t.Logf("the VM's notes:\n%s", notes)
	if !strings.Contains(notes, fmt.Sprintf("uid %d\n", u.uid)) {
		t.Errorf("the monitor did not run as %d", u.uid)
	}
	if !strings.Contains(notes, "denied records") || !strings.Contains(notes, "denied record\n") {
		t.Error("the VM's id reached the run records")
	}
	checkMode := func(p string, want os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Error(err)
			return
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != want || st.Uid != 0 || fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s: %v uid %d while the run is alive, want root's %04o", p, fi.Mode(), st.Uid, want)
		}
	}
	checkMode(records, 0o700)
	recs, _ := filepath.Glob(filepath.Join(records, "*.json"))
	if len(recs) != 1 {
		t.Errorf("records %v, want the run's one", recs)
	}
	for _, r := range recs {
		checkMode(r, 0o600)
	}
	checkMode(leasePath(u.uid), 0o600)
	var h uidpool.Holder
	if b, err := os.ReadFile(leasePath(u.uid)); err != nil || json.Unmarshal(b, &h) != nil {
		t.Errorf("lease %s: %v %q", leasePath(u.uid), err, b)
	} else if len(recs) == 1 && (h.Record != recs[0] || h.PID != os.Getpid()) {
		t.Errorf("lease %s holds %+v, want this process and the record %s", leasePath(u.uid), h, recs[0])
	}
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err == nil || !strings.Contains(res.err.Error(), "launcher exited before it was ready") {
		t.Errorf("vlctl run: %v, want the fake launcher's failure\n%s", res.err, res.status)
	}
	if left, _ := os.ReadDir(records); len(left) != 0 {
		t.Errorf("left in the record dir: %v", left)
	}
	if _, err := os.Lstat(leasePath(u.uid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run's lease is left: %v", err)
	}
	l.nothingLeft(t)
	c.untouched(t)
}

// TestPathsOneLeaseTable: a run recorded in another record directory
// leases from the same table: the id another run holds (its lease in the
// machine's table, its processes not started yet) is not handed out
// again. The refused run makes nothing.
func TestPathsOneLeaseTable(t *testing.T) {
	u := needLinkUser(t)
	// The first run: its lease, taken the way vlctl run takes it, with
	// its record in a directory of its own.
	pool, err := uidpool.ForMachine(u.uids())
	if err != nil {
		t.Fatal(err)
	}
	first, err := pool.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Release("/proc") })
	if err := first.SetRecord(filepath.Join(testenv.OpenDir(t), "1-ab12.json")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(leasePath(u.uid))

	l := newLinkRun(t, u, "#!/bin/sh\necho 'the second run started its launcher'\nexit 3\n")
	records := testenv.OpenDir(t)
	status, err := l.runWith(records, nil)
	want := fmt.Sprintf("no free id in %d-%d", u.uid, u.uid)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a second run with another --record-dir: %v, want %q (one lease table per machine)\n%s", err, want, status)
	}
	if after, _ := os.ReadFile(leasePath(u.uid)); string(after) != string(before) {
		t.Errorf("the first run's lease changed: %q, was %q", after, before)
	}
	if ents, _ := os.ReadDir(records); len(ents) != 0 {
		t.Errorf("the refused run left %v in its record dir", ents)
	}
	l.nothingLeft(t)
	if pids, _ := procfs.Holding("/proc", uint32(u.uid)); len(pids) > 0 {
		t.Errorf("processes %v run as the id", pids)
	}
}
