package uidpool

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in          string
		first, last uint32
		err         string
	}{
		{DefaultRange, 1879048192, 1879113727, ""},
		{"5000-5000", 5000, 5000, ""},
		{"5000", 0, 0, "want FIRST-LAST"},
		{"a-b", 0, 0, "want FIRST-LAST"},
		{"6000-5000", 0, 0, "FIRST is above LAST"},
		{"0-2000", 0, 0, "below 1000"},
		{"60000-70000", 0, 0, "65534"},
		{"4294967290-4294967295", 0, 0, "-1"},
		{"70000-16850000", 0, 0, "more than"},
	} {
		f, l, err := ParseRange(c.in)
		if c.err == "" && (err != nil || f != c.first || l != c.last) {
			t.Errorf("%q: got %d-%d, %v", c.in, f, l, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: error %v, want one with %q", c.in, err, c.err)
		}
	}
}

func testPool(t *testing.T, first, last uint32) *Pool {
	t.Helper()
	testenv.Root(t, "the lease directory must be root's")
	return &Pool{Dir: filepath.Join(t.TempDir(), "uids"), First: first, Last: last, ProcRoot: "/proc"}
}

// TestAllocateDistinct: every lease of a small range is a different id, the
// range runs out with a clear error, and a released id can be taken again.
func TestAllocateDistinct(t *testing.T) {
	p := testPool(t, 1879048192, 1879048195)
	var got []uint32
	var leases []*Lease
	for range 4 {
		l, err := p.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.ID)
		leases = append(leases, l)
	}
	slices.Sort(got)
	if !slices.Equal(got, []uint32{1879048192, 1879048193, 1879048194, 1879048195}) {
		t.Fatalf("leases %v, want the four ids once each", got)
	}
	if _, err := p.Allocate(); err == nil || !strings.Contains(err.Error(), "no free id in 1879048192-1879048195") {
		t.Fatalf("fifth lease: %v, want no free id", err)
	}
	if err := leases[2].Release("/proc"); err != nil {
		t.Fatal(err)
	}
	l, err := p.Allocate()
	if err != nil || l.ID != leases[2].ID {
		t.Fatalf("after a release: %v, %v; want id %d", l, err, leases[2].ID)
	}
}

// TestAllocateSkips: ids held by a process, by a passwd entry or inside a
// delegated sub-id range are never handed out.
func TestAllocateSkips(t *testing.T) {
	testenv.Root(t, "a process of another uid stands for a busy id")
	// Root's own id 0 cannot be in a range; a process running as a pool id
	// stands for the others' case.
	busy := uint32(1879050000)
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: busy, Gid: busy}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p := testPool(t, busy, busy)
	if _, err := p.Allocate(); err == nil || !strings.Contains(err.Error(), "process") {
		t.Errorf("id of a running process: %v, want refused naming the process", err)
	}
	sub := filepath.Join(t.TempDir(), "subuid")
	if err := os.WriteFile(sub, []byte("alice:1879060000:10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = testPool(t, 1879060000, 1879060010)
	p.SubIDFiles = []string{sub}
	l, err := p.Allocate()
	if err != nil || l.ID != 1879060010 {
		t.Errorf("with 1879060000+10 delegated: %v, %v; want 1879060010", l, err)
	}
	// A passwd entry: the machine's nobody (65534) is refused by the range
	// rules, so take any user the machine has above 1000, when it has one.
	if u, err := userAbove1000(); err == nil {
		p = testPool(t, u, u)
		if _, err := p.Allocate(); err == nil {
			t.Errorf("id %d of a passwd entry was handed out", u)
		}
	}
}

func userAbove1000() (uint32, error) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 3 {
			if v, err := strconv.ParseUint(f[2], 10, 32); err == nil && v >= 1000 && v != 65534 && v != 65535 {
				return uint32(v), nil
			}
		}
	}
	return 0, os.ErrNotExist
}

// TestReleaseAndSweep: a lease is kept while a process runs with its id;
// Sweep frees a dead holder's lease, keeps a live holder's and the ones
// keep names.
func TestReleaseAndSweep(t *testing.T) {
	p := testPool(t, 1879070000, 1879070009)
	l, err := p.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: l.ID}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release("/proc"); err == nil || !strings.Contains(err.Error(), "still run") {
		t.Errorf("release with a process in its group: %v, want kept", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := l.Release("/proc"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.path); !os.IsNotExist(err) {
		t.Fatalf("lease file after release: %v", err)
	}

	live, err := p.Allocate() // held by this test process: alive
	if err != nil {
		t.Fatal(err)
	}
	write := func(id uint32, content string) {
		if err := os.WriteFile(filepath.Join(p.Dir, strconv.FormatUint(uint64(id), 10)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var deadA, deadB, garbage uint32
	for _, id := range []uint32{1879070000, 1879070001, 1879070002, 1879070003} {
		if id == live.ID {
			continue
		}
		switch {
		case deadA == 0:
			deadA = id
		case deadB == 0:
			deadB = id
		default:
			garbage = id
		}
	}
	write(deadA, `{"pid":1,"pidStart":1}`) // pid 1 started at another time
	write(deadB, `{"pid":1,"pidStart":1}`)
	write(garbage, `not json`)
	freed, err := p.Sweep(func(id uint32) bool { return id == deadB })
	slices.Sort(freed)
	want := []uint32{deadA, garbage}
	slices.Sort(want)
	if err != nil || !slices.Equal(freed, want) {
		t.Fatalf("Sweep freed %v, %v; want %v", freed, err, want)
	}
	for _, id := range []uint32{live.ID, deadB} {
		if _, err := os.Stat(filepath.Join(p.Dir, strconv.FormatUint(uint64(id), 10))); err != nil {
			t.Errorf("lease %d swept: %v", id, err)
		}
	}
}

// TestLeaseDirMustBeRoots: a lease directory another user could write is
// refused.
func TestLeaseDirMustBeRoots(t *testing.T) {
	p := testPool(t, 1879080000, 1879080009)
	if err := os.MkdirAll(p.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allocate(); err == nil || !strings.Contains(err.Error(), p.Dir+" is writable by users other than its owner") {
		t.Fatalf("world-writable lease dir: %v", err)
	}
}

// TestOneTablePerMachine: every run leases from the machine's table,
// whatever record directory it uses: two tables would hand one id to two
// VMs.
func TestOneTablePerMachine(t *testing.T) {
	p, err := ForMachine(DefaultRange)
	if err != nil {
		t.Fatal(err)
	}
	if p.Dir != DefaultDir || DefaultDir != "/run/vlctl/uids" {
		t.Errorf("the machine's pool leases in %s (DefaultDir %s)", p.Dir, DefaultDir)
	}
}

// TestRecordKeepsLease: a lease whose holder is gone stays while the run
// record it names exists (the run's clean-up is not done: vlctl gc, from
// whatever record directory, still has to do it under that id), and goes
// once the record is gone.
func TestRecordKeepsLease(t *testing.T) {
	p := testPool(t, 1879090000, 1879090000)
	l, err := p.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "123-ab12.json")
	if err := os.WriteFile(record, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRecord(record); err != nil {
		t.Fatal(err)
	}
	h, ok, err := p.Holder(l.ID)
	if err != nil || !ok || h.Record != record || h.PID != os.Getpid() {
		t.Fatalf("Holder = %+v, %v, %v; want this process and %s", h, ok, err, record)
	}
	if st, err := os.Stat(l.path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lease file after SetRecord: %v %v", st.Mode(), err)
	}
	// The holder dies (a lease of another start time), the record stays.
	h.PIDStart++
	content, _ := json.Marshal(h)
	if err := os.WriteFile(l.path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if freed, err := p.Sweep(nil); err != nil || len(freed) != 0 {
		t.Fatalf("Sweep with the record there freed %v, %v", freed, err)
	}
	if _, err := p.Allocate(); err == nil {
		t.Fatal("the id of a run whose record awaits clean-up was handed out again")
	}
	if err := os.Remove(record); err != nil {
		t.Fatal(err)
	}
	if freed, err := p.Sweep(nil); err != nil || !slices.Equal(freed, []uint32{l.ID}) {
		t.Fatalf("Sweep with the record gone freed %v, %v; want %d", freed, err, l.ID)
	}
}

// TestClaim: gc claims the id of a dead run that has no lease any more;
// an id leased already is not claimed.
func TestClaim(t *testing.T) {
	p := testPool(t, 1879091000, 1879091000)
	dead := Holder{PID: 1, PIDStart: 1, Record: "/run/vlctl/1-ab12.json"}
	if err := p.Claim(1879091000, dead); err != nil {
		t.Fatal(err)
	}
	if h, ok, err := p.Holder(1879091000); err != nil || !ok || h != dead {
		t.Fatalf("Holder after Claim = %+v, %v, %v", h, ok, err)
	}
	if err := p.Claim(1879091000, Holder{PID: 2}); !errors.Is(err, os.ErrExist) {
		t.Errorf("second Claim: %v, want ErrExist", err)
	}
	if _, ok, err := p.Holder(1879091001); ok || err != nil {
		t.Errorf("Holder of an id without a lease: %v, %v", ok, err)
	}
}
