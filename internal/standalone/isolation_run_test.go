package standalone_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/capscache"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

// checkIsolated checks that running VMs, each recorded in records, cannot
// reach one another (docs/standalone.md, "One id per VM"): every VM runs as an id of its own, leased, with
// its processes (monitor, launcher, daemon, QEMU) all running as it and
// seeing a passwd that names it while the host's does not; one VM's id
// can neither reach another VM's launcher socket nor write the shared
// capability cache, which it can read.
func checkIsolated(t *testing.T, records string) {
	t.Helper()
	entries, err := runrecord.List(records)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 {
		t.Fatalf("%d runs recorded, want 2 or more", len(entries))
	}
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]string{}
	for _, e := range entries {
		if e.UID < 1000 {
			t.Fatalf("%s: recorded uid %d, want a leased one", e.FullName(), e.UID)
		}
		if other, ok := seen[e.UID]; ok {
			t.Errorf("%s and %s share uid %d", e.FullName(), other, e.UID)
		}
		seen[e.UID] = e.FullName()
		if _, err := os.Stat(filepath.Join(uidpool.DefaultDir, strconv.FormatUint(uint64(e.UID), 10))); err != nil {
			t.Errorf("%s: no lease for uid %d: %v", e.FullName(), e.UID, err)
		}
		procs, err := procfs.Under("/proc", e.WorkDir)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		for _, p := range procs {
			uids, _, err := procfs.IDs("/proc", p.PID)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(uids, e.UID) || slices.ContainsFunc(uids, func(u uint32) bool { return u != e.UID }) {
				args, _ := procfs.Cmdline("/proc", p.PID)
				t.Errorf("%s: process %d (%.80s) does not run as uid %d", e.FullName(), p.PID, strings.Join(args, " "), e.UID)
			}
			kinds[p.Comm] = true
			if strings.HasPrefix(p.Comm, "qemu") {
				pw, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/root/etc/passwd")
				if err != nil || !strings.Contains(string(pw), "vl-"+strconv.FormatUint(uint64(e.UID), 10)+":x:") {
					t.Errorf("%s: QEMU's /etc/passwd does not name its user: %v", e.FullName(), err)
				}
			}
		}
		t.Logf("%s runs as uid %d: %d processes checked (%v)", e.FullName(), e.UID, len(procs), kinds)
		if !kinds["virt-launcher"] || !anyPrefix(kinds, "qemu") {
			t.Errorf("%s: processes under its work dir: %v, want the launcher and QEMU among them", e.FullName(), kinds)
		}
		if strings.Contains(string(hostPasswd), ":"+strconv.FormatUint(uint64(e.UID), 10)+":") {
			t.Errorf("the host's /etc/passwd names uid %d", e.UID)
		}
	}
	a, b := entries[0], entries[1]
	// The kernel's own answer (access(2) as that user): a unix socket is
	// dialled with write permission on it and search on its directories.
	if !as(t, a.UID, "-w", a.Socket) {
		t.Errorf("%s's uid cannot reach its own launcher socket %s (the check below proves nothing)", a.FullName(), a.Socket)
	}
	if as(t, a.UID, "-w", b.Socket) || as(t, a.UID, "-e", b.WorkDir+"/private") {
		t.Errorf("%s's uid %d reaches into %s's work dir (%s)", a.FullName(), a.UID, b.FullName(), b.WorkDir)
	}
	caps := capscache.DefaultDir
	files, _ := filepath.Glob(filepath.Join(caps, "*.xml"))
	if len(files) == 0 {
		t.Fatalf("no capability file in %s", caps)
	}
	if !as(t, a.UID, "-r", files[0]) {
		t.Errorf("%s's uid cannot read the shared capability cache %s", a.FullName(), files[0])
	}
	if as(t, a.UID, "-w", files[0]) || as(t, a.UID, "-w", caps) {
		t.Errorf("%s's uid can change the shared capability cache %s", a.FullName(), caps)
	}
}

// as runs test(1) with args as uid (and gid) id.
func as(t *testing.T, id uint32, args ...string) bool {
	t.Helper()
	cmd := exec.Command("/usr/bin/test", args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	err := cmd.Run()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("test %v as %d: %v", args, id, err)
	}
	return err == nil
}

func anyPrefix(set map[string]bool, prefix string) bool {
	for k := range set {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// checkLeasesGone: no run recorded in records holds an id any more (the
// machine's one lease table names each lease's record).
func checkLeasesGone(t *testing.T, records string) {
	t.Helper()
	ents, _ := os.ReadDir(uidpool.DefaultDir)
	var left []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(uidpool.DefaultDir, e.Name()))
		var h uidpool.Holder
		if err == nil && json.Unmarshal(b, &h) == nil && strings.HasPrefix(h.Record, records+"/") {
			left = append(left, e.Name()+" ("+h.Record+")")
		}
	}
	if len(left) != 0 {
		t.Errorf("uid leases of runs recorded in %s left in %s: %v", records, uidpool.DefaultDir, left)
	}
}
