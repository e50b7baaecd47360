package integration

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

var vcpuThread = regexp.MustCompile(`^CPU (\d+)/(KVM|TCG)$`)

// threadAffinity is, by "TID name", where each thread of pid may run
// (Cpus_allowed_list); the process's main thread is named "main".
func threadAffinity(t *testing.T, pid int) map[string]string {
	t.Helper()
	threads, err := procfs.Threads("/proc", pid)
	launchertest.Must(t, err)
	out := map[string]string{}
	for _, th := range threads {
		name := th.Comm
		if th.TID == pid {
			name = "main"
		}
		out[strconv.Itoa(th.TID)+" "+name] = th.Allowed
	}
	return out
}

// TestDedicatedCPUs runs the launcher in a pod whose cgroup cpuset a CPU
// manager has narrowed, and a guest with dedicatedCpuPlacement: the
// launcher reads its CPU set, pins the vCPU there, and QEMU's threads
// really run where the domain says (read back from /proc, not only the
// XML). With two CPUs and isolateEmulatorThread, the vCPU thread and the
// emulator threads are each on one of them.
func TestDedicatedCPUs(t *testing.T) {
	testenv.Root(t, "cpuset cgroups for the pod")
	all, _, err := hostcpu.Sys{Root: "/"}.OwnCPUSet("self")
	launchertest.Must(t, err)
	for _, tc := range []struct {
		name    string
		cpus    []uint
		isolate bool
		vcpu    string // where the vCPU thread must be allowed to run
		rest    string // where every other QEMU thread must
	}{
		{name: "one CPU", cpus: []uint{all[len(all)-1]},
			vcpu: hostcpu.FormatList(all[len(all)-1:]), rest: hostcpu.FormatList(all[len(all)-1:])},
		{name: "isolated emulator thread", cpus: all[:2], isolate: true,
			vcpu: hostcpu.FormatList(all[:1]), rest: hostcpu.FormatList(all[1:2])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(all) < len(tc.cpus) {
				t.Fatalf("needs %d CPUs, this process may use %v", len(tc.cpus), all)
			}
			p := env.New(t, "dedicated", podOpts{CPUSet: tc.cpus})
			p.WaitReady(30 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			c := p.Client(ctx)
			v := p.VMI("dedicated", testguest.OptNoAgent)
			cpu := v.Spec.Domain.CPU
			cpu.Sockets, cpu.Cores, cpu.Threads, cpu.MaxSockets = 1, 1, 1, 0
			cpu.DedicatedCPUPlacement, cpu.IsolateEmulatorThread = true, tc.isolate
			if err := c.Sync(ctx, v, nil); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			p.WaitConsole(testguest.MarkerBooted, bootTimeout)
			d, _, err := c.GetDomain(ctx)
			launchertest.Must(t, err)
			tune := d.Spec.CPUTune
			if tune == nil || len(tune.VCPUPin) != 1 || tune.VCPUPin[0].CPUSet != tc.vcpu {
				t.Errorf("domain cputune %+v, want vCPU 0 on %s", tune, tc.vcpu)
			}
			if tc.isolate && (tune == nil || tune.EmulatorPin == nil || tune.EmulatorPin.CPUSet != tc.rest) {
				t.Errorf("domain cputune %+v, want the emulator on %s", tune, tc.rest)
			}
			threads := threadAffinity(t, p.QemuPid())
			vcpus := 0
			for thread, allowed := range threads {
				_, name, _ := strings.Cut(thread, " ")
				want := tc.rest
				if vcpuThread.MatchString(name) {
					want = tc.vcpu
					vcpus++
				}
				if allowed != want {
					t.Errorf("QEMU thread %s may run on %q, want %q", thread, allowed, want)
				}
			}
			if vcpus != 1 {
				t.Errorf("%d vCPU threads among QEMU's %v, want 1", vcpus, threads)
			}
			t.Logf("pod cpuset %s: QEMU threads' Cpus_allowed_list %v", hostcpu.FormatList(tc.cpus), threads)
		})
	}
}
