package monitor

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// fakeProc writes a /proc-like tree: pid -> "ppid state comm".
func fakeProc(t *testing.T, self int, procs map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, desc := range procs {
		f := strings.SplitN(desc, " ", 3)
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := strconv.Itoa(pid) + " (" + f[2] + ") " + f[1] + " " + f[0] + " 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte("/usr/bin/"+f[2]+"\x00-x\x00"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(strconv.Itoa(self), filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestDescendants(t *testing.T) {
	self := os.Getpid()
	// self -> 100 (launcher) -> 101 (libvirtd) -> 102 (qemu, odd comm)
	// self -> 103 (zombie); 1 -> 200 (someone else's qemu); 200 -> 201
	root := fakeProc(t, self, map[int]string{
		self: "1 S monitor",
		1:    "0 S init",
		100:  strconv.Itoa(self) + " S virt-launcher",
		101:  "100 S libvirtd",
		102:  "101 S qemu-system-x86",
		103:  strconv.Itoa(self) + " Z sh",
		104:  "101 S a) b (c",
		200:  "1 S qemu-system-x86",
		201:  "200 S qemu-kvm",
	})
	got := func(match func(procfs.Stat) bool) []int {
		ps, err := descendants(root, self, match)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		for _, p := range ps {
			pids = append(pids, p.PID)
		}
		slices.Sort(pids)
		return pids
	}
	if all := got(nil); !slices.Equal(all, []int{100, 101, 102, 104}) {
		t.Errorf("descendants = %v, want [100 101 102 104]", all)
	}
	if q := got(func(p procfs.Stat) bool { return isQemu(root, p) }); !slices.Equal(q, []int{102}) {
		t.Errorf("qemu descendants = %v, want [102]", q)
	}
}

func TestForeignProcRefused(t *testing.T) {
	// A /proc whose "self" is not us: another pid namespace's.
	root := fakeProc(t, os.Getpid()+1, map[int]string{1: "0 S init", 5: "1 S qemu-system-x86"})
	if _, err := descendants(root, 1, nil); err != errForeignProc {
		t.Errorf("descendants on a foreign /proc: %v, want errForeignProc", err)
	}
	if err := signalIfStill(root, 1, procfs.Stat{PID: 5, Comm: "qemu-system-x86"}, 0); err != errForeignProc {
		t.Errorf("signalIfStill on a foreign /proc: %v, want errForeignProc", err)
	}
	if !procIsOurs("/proc") {
		t.Error("the real /proc is not recognised as ours")
	}
}

// TestAsPID1 runs the monitor as PID 1 of a new pid namespace with its own
// /proc, as in a pod: exit status, reaping, and finding its QEMU there.
func TestAsPID1(t *testing.T) {
	testenv.Programs(t, "unshare") // makes a pid namespace
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal(err)
	}
	qemu := fakeQemu(t, "/bin/sleep")
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", monitorBin, "--uid", "pid1")
	cmd.Env = append(os.Environ(), EnvLauncherBin+"="+fakeBin, "FAKE_EXIT=4", "FAKE_ORPHANS=50",
		"FAKE_ORPHAN_CMDS="+qemu+" 300")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("monitor as PID 1 did not exit")
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 4 {
		t.Fatalf("exit: %v, want status 4; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "terminating QEMU left behind") {
		t.Errorf("QEMU in the namespace not found; output:\n%s", out)
	}
}
