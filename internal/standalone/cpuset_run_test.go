package standalone_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestVlctlRunCPUSet: a VMI with dedicatedCpuPlacement is refused without
// --cpuset, naming the flag; with --cpuset of one CPU its QEMU's threads,
// the vCPU's among them, may run on that CPU alone (read from /proc), and
// after Ctrl-C the pod's cpuset cgroup is gone with the rest.
func TestVlctlRunCPUSet(t *testing.T) {
	needRoot(t)
	if _, err := testguest.Build(context.Background(), testguest.DefaultCacheDir()); err != nil {
		t.Fatalf("test guest: %v", err)
	}
	manifest := testGuestText(t, "dcpu", "--no-network")
	manifest = strings.Replace(manifest, "  domain:\n", "  domain:\n    cpu:\n      dedicatedCpuPlacement: true\n", 1)
	if !strings.Contains(manifest, "dedicatedCpuPlacement") {
		t.Fatalf("manifest of vlctl testguest changed shape:\n%s", manifest)
	}
	file := filepath.Join(t.TempDir(), "dcpu.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	root := workRoot(t)

	code, _, stderr := vlctl(t, time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
	if code != 1 {
		t.Errorf("without --cpuset: exit %d, want 1", code)
	}
	oneLineError(t, stderr, "spec.domain.cpu.dedicatedCpuPlacement", "--cpuset LIST")
	checkNothingLeft(t, root)

	all, _, err := hostcpu.Sys{Root: "/"}.OwnCPUSet("self")
	if err != nil {
		t.Fatal(err)
	}
	one := hostcpu.FormatList(all[len(all)-1:])
	cmd, stdout, _, exited := startVlctl(t, "run", "--emulation", "--cpuset", one, "--workdir", root, "--record-dir", workRoot(t), file)
	waitFor(t, "the guest's ready marker", 3*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerReady)
	})
	qemu := processBelow(root, "qemu-system-x86_64")
	if qemu == 0 {
		t.Error("no QEMU below the work root")
	} else {
		threads, err := procfs.Threads("/proc", qemu)
		if err != nil {
			t.Fatal(err)
		}
		vcpus := 0
		for _, th := range threads {
			if regexp.MustCompile(`^CPU \d+/(KVM|TCG)$`).MatchString(th.Comm) {
				vcpus++
			}
			if th.Allowed != one {
				t.Errorf("QEMU thread %d %q may run on %q, want %q", th.TID, th.Comm, th.Allowed, one)
			}
		}
		if vcpus != 1 {
			t.Errorf("%d vCPU threads in %+v, want 1", vcpus, threads)
		}
		t.Logf("--cpuset %s: QEMU threads %+v", one, threads)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-exited
		t.Fatal("vlctl did not end within 2 min of SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	checkNothingLeft(t, root)
	if left, _ := filepath.Glob("/sys/fs/cgroup/cpuset/vlctl-*"); len(left) > 0 {
		t.Errorf("cpuset cgroups left: %v", left)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/vlctl-*"); len(left) > 0 {
		t.Errorf("cpuset cgroups left: %v", left)
	}
}
