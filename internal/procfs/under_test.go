package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestUnder: a process started with a path inside a directory on its
// command line, and one whose working directory is inside it, are found;
// a process naming only a sibling with the same prefix is not.
func TestUnder(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	start := func(cwd string, args ...string) int {
		cmd := exec.Command("sleep", args...)
		cmd.Dir = cwd
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	// byArg runs a shell whose command line names path.
	byArg := func(path string) int {
		cmd := exec.Command("sh", "-c", "sleep 60; : "+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd.Process.Pid
	}
	named := byArg(filepath.Join(dir, "disk.img"))
	flag := byArg("--dir=" + dir)
	inside := start(sub, "60")
	sibling := byArg(dir + "x/disk.img")
	got, err := Under("/proc", dir)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, s := range got {
		pids = append(pids, s.PID)
		if s.StartTime == 0 {
			t.Errorf("pid %d without a start time", s.PID)
		}
	}
	if !slices.Contains(pids, named) || !slices.Contains(pids, inside) || !slices.Contains(pids, flag) {
		t.Errorf("Under(%s) = %v, want %d (names a path inside), %d (works inside) and %d (names it in a flag)", dir, pids, named, inside, flag)
	}
	if slices.Contains(pids, sibling) {
		t.Errorf("Under(%s) = %v holds %d, which names only %sx", dir, pids, sibling, dir)
	}
}
