package hostcpu

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestCgroup makes a cpuset group of one CPU, starts a process in it the
// way internal/pod starts a pod's monitor (from a locked thread, with the
// enter step on v1), and reads back what the launcher would: the
// process's own CPU set through OwnCPUSet and the kernel's affinity in
// /proc/PID/status. The group is gone afterwards.
func TestCgroup(t *testing.T) {
	testenv.Root(t, "cpuset cgroups")
	all, _, err := Sys{Root: "/"}.OwnCPUSet("self")
	if err != nil {
		t.Fatal(err)
	}
	one := []uint{all[len(all)-1]}
	cg, err := NewCgroup("vltest-", one)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cg.Remove(ctx); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(cg.Dir); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", cg.Dir, err)
		}
	}()
	cmd := exec.Command("sleep", "30")
	enter, placed, err := cg.Place(cmd)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked, as internal/pod's
		if enter != nil {
			if err := enter(); err != nil {
				started <- err
				return
			}
		}
		err := cmd.Start()
		started <- err
		if err == nil {
			cmd.Wait()
		}
		close(done)
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if err := placed(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); <-done }()
	pid := cmd.Process.Pid
	got, file, err := Sys{Root: "/"}.OwnCPUSet(strconv.Itoa(pid))
	if err != nil || FormatList(got) != FormatList(one) {
		t.Errorf("the process's CPU set: %v from %s, %v; want %v", got, file, err, one)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(status), "Cpus_allowed_list:\t"+FormatList(one)+"\n") {
		t.Errorf("affinity of %d is not %v:\n%s", pid, one, status)
	}
}
