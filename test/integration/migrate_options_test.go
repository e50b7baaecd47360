package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/hostcpu"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/migration"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// v19StallDetector is what KubeVirt v1.9's handler sends with the
// MigrationStallDetection gate on and no policy changing it.
func v19StallDetector() *migration.StallDetectorOptions {
	return &migration.StallDetectorOptions{StallMargin: 0.04, StallProgressTimeout: 40, SwitchoverTimeout: 60, EwmaAlpha: 0.4,
		PrecopyPossibleFactor: 1.5, PatienceWindowDecayFactor: 0.5, SearchLocalMinima: true, CompletionTimeoutFactor: 2}
}

// maxDowntime reads the source domain's migration downtime limit from its
// daemon (virDomainMigrateGetMaxDowntime), over a connection of the
// test's own.
func maxDowntime(t *testing.T, mp *migrationPair) uint64 {
	t.Helper()
	l := mp.a.Libvirt()
	d, err := l.DomainLookupByName(mp.a.DomainName())
	launchertest.Must(t, err)
	ms, err := l.DomainMigrateGetMaxDowntime(d, 0)
	launchertest.Must(t, err)
	return ms
}

// TestMigrationMaxDowntime: a migration under KubeVirt v1.9's options
// (the stall detector on, MaxDowntimeMs 100, zstd compression over 8
// connections) lowers QEMU's downtime limit from its 300 ms to 100 ms as
// it starts, read back from the source's daemon; the compression this
// libvirt (9.0) cannot do is dropped, saying why, and the migration runs
// without it; cancelled, it ends as v1.9 reports it and the guest counts
// on in the source pod.
func TestMigrationMaxDowntime(t *testing.T) {
	mp := newMigrationPair(t, false)
	mp.prepareTarget(t)
	if ms := maxDowntime(t, mp); ms != 300 {
		t.Fatalf("before the migration the downtime limit is %d ms, want QEMU's 300", ms)
	}
	zstd, threads := "zstd", uint(8)
	o := slow()
	o.MaxDowntimeMs, o.StallDetectorOptions, o.Compression, o.ParallelMigrationThreads = 100, v19StallDetector(), &zstd, &threads
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, o))
	mp.waitMigrating(t)
	deadline := time.Now().Add(10 * time.Second)
	for ms := maxDowntime(t, mp); ms != 100; ms = maxDowntime(t, mp) {
		if time.Now().After(deadline) {
			t.Fatalf("the migration's downtime limit is %d ms, want MaxDowntimeMs 100", ms)
		}
		time.Sleep(200 * time.Millisecond)
	}
	log := mp.a.Stderr.String()
	if !strings.Contains(log, "no compression: libvirt 9.0.0 knows only the mt and xbzrle methods") && !strings.Contains(log, "no compression: zstd compresses parallel connections only") {
		t.Errorf("the source did not say why it migrates without compression")
	}
	launchertest.Must(t, mp.ca.CancelMigration(mp.ctx, mp.vm))
	m := waitMigration(t, mp.ctx, mp.ca, "source", time.Minute)
	if !m.Failed || m.AbortStatus != string(v1.MigrationAbortSucceeded) || m.FailureReason != "Live migration has been aborted" {
		t.Errorf("the cancelled migration: %+v", m)
	}
	mp.stillCounting(t)
}

// TestMigrationStallDetector: a guest dirtying 8 MB of memory over and
// over, migrated at 16 MiB/s with MaxDowntimeMs 100, never gets its
// remaining data below the half second the limit allows: at the start of
// each pass as much is left as a few seconds before. The stall detector
// (a 3 s window, v1.9's other defaults) sees the stall, finds the
// estimated downtime beyond 1.5 times the limit and aborts the migration
// long before its completion limit; the migration ends as v1.9 reports an
// abort, the detector's reason in the log, and the guest counts on in the
// source pod.
func TestMigrationStallDetector(t *testing.T) {
	mp := newMigrationPair(t, false, dirtier)
	mp.prepareTarget(t)
	sd := v19StallDetector()
	sd.StallProgressTimeout = 3
	o := migration.Options{Bandwidth: resource.MustParse("16Mi"), ProgressTimeout: 150, CompletionTimeoutPerGiB: 150,
		MaxDowntimeMs: 100, StallDetectorOptions: sd}
	t0 := time.Now()
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, o))
	m := waitMigration(t, mp.ctx, mp.ca, "source", 2*time.Minute)
	took := time.Since(t0)
	if !m.Failed || m.AbortStatus != string(v1.MigrationAbortSucceeded) || m.FailureReason != "Live migration has been aborted" {
		t.Errorf("the stalled migration: %+v, want it aborted", m)
	}
	why := regexp.MustCompile(`"msg":"aborted the migration"[^\n]*"reason":"(estimated downtime \d+ms exceeds max allowed downtime 100ms by a factor of more than x1.50)"`).FindStringSubmatch(mp.a.Stderr.String())
	if why == nil {
		t.Fatalf("the source did not log the stall detector's abort:\n%s", launchertest.Tail(mp.a.Stderr.String(), 3000))
	}
	t.Logf("aborted after %v: %s", took.Round(time.Second), why[1])
	mp.stillCounting(t)
}

// TestPreMigrationHook: a VMI with dedicated CPUs migrates between pods
// run with --libvirt-hook-server-and-client (KubeVirt v1.9's default),
// both with the image's libvirt qemu hook (the hook client, here told the
// sockets below the pods' fixed root). The target starts the pre-migration
// hook server when it is prepared; its daemon runs the hook as the
// migration begins, and the domain arrives pinned to the target's CPU
// (dedicatedCPUMigration). The server is gone after its one call.
func TestPreMigrationHook(t *testing.T) { dedicatedCPUMigration(t, true) }

// TestMigrationDedicatedCPUs: the same without the hook server (v1.8.2's
// default): the source sends the domain pinned to the CPUs of
// status.migrationState.targetCPUSet, placed on targetNodeTopology.
func TestMigrationDedicatedCPUs(t *testing.T) { dedicatedCPUMigration(t, false) }

// dedicatedCPUMigration migrates a VMI with dedicated CPUs from a pod on
// the host's second CPU to one on its first, with the pre-migration hook
// server or without: the domain arrives pinned to the target's CPU, where
// QEMU's vCPU thread then runs, and the guest counts on. The source
// leaves the migrated marker in the backend storage volume (the launcher:
// libvirt 9.0's release hook is not told the domain migrated).
func dedicatedCPUMigration(t *testing.T, hooks bool) {
	testenv.Root(t, "cpuset cgroups for the pods")
	all, _, err := hostcpu.Sys{Root: "/"}.OwnCPUSet("self")
	launchertest.Must(t, err)
	if len(all) < 2 {
		t.Fatalf("needs 2 CPUs, this process may use %v", all)
	}
	srcCPU, dstCPU := hostcpu.FormatList(all[1:2]), hostcpu.FormatList(all[:1])
	etc, err := os.MkdirTemp("", "vletc")
	launchertest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(etc) })
	launchertest.Must(t, os.MkdirAll(filepath.Join(etc, "hooks"), 0o755))
	launchertest.Must(t, os.Chmod(etc, 0o755))
	var socket, marker string
	mp := newMigrationPairWith(t, false, pairSetup{
		pods: func(o *podOpts) {
			o.CPUSet = all[1:2]
			l := layout.Under(o.FixedRoot)
			socket = l.MigrationHookSocket()
			marker = l.MigratedMarker()
			if !hooks {
				return
			}
			o.EtcLibvirt, o.PreMigrationHooks = etc, true
			script := fmt.Sprintf("#!/bin/sh\nexec %s --socket=%s --migrated-marker=%s \"$@\"\n",
				filepath.Join(env.BinDir, "libvirt-hook-client"), socket, marker)
			launchertest.Must(t, os.WriteFile(filepath.Join(etc, "hooks", "qemu"), []byte(script), 0o755))
		},
		target: func(o *podOpts) { o.CPUSet = all[:1] },
		vmi: func(v *v1.VirtualMachineInstance, _, _ *pod) {
			cpu := v.Spec.Domain.CPU
			cpu.Sockets, cpu.Cores, cpu.Threads, cpu.MaxSockets = 1, 1, 1, 0
			cpu.DedicatedCPUPlacement = true
		},
	})
	if !hooks {
		// What the target's handler reports (reportDedicatedCPUSetForMigratingVMI,
		// reportTargetTopologyForMigratingVMI).
		cells, err := hostcpu.Sys{Root: "/"}.NUMA()
		launchertest.Must(t, err)
		topo := &cmdv1.Topology{}
		for _, c := range cells {
			cell := &cmdv1.Cell{Id: uint32(c.ID)}
			for _, cpu := range c.CPUs {
				hc := &cmdv1.CPU{Id: uint32(cpu.ID)}
				for _, s := range cpu.Siblings {
					hc.Siblings = append(hc.Siblings, uint32(s))
				}
				cell.Cpus = append(cell.Cpus, hc)
			}
			topo.NumaCells = append(topo.NumaCells, cell)
		}
		b, err := json.Marshal(topo)
		launchertest.Must(t, err)
		mp.vm.Status.MigrationState.TargetCPUSet = []int{int(all[0])}
		mp.vm.Status.MigrationState.TargetNodeTopology = string(b)
	}
	inPod := func(p *pod, path string) string {
		return filepath.Join(p.Dir, strings.TrimPrefix(path, p.Options().FixedRoot))
	}
	if d, _, err := mp.ca.GetDomain(mp.ctx); err != nil || d.Spec.CPUTune == nil || len(d.Spec.CPUTune.VCPUPin) != 1 || d.Spec.CPUTune.VCPUPin[0].CPUSet != srcCPU {
		t.Fatalf("the source's domain: %+v (%v), want vCPU 0 on %s", d.Spec.CPUTune, err, srcCPU)
	}
	// KubeVirt's backend storage volume, where the source leaves its
	// marker.
	meta := filepath.Dir(inPod(mp.a, marker))
	launchertest.Must(t, os.Mkdir(meta, 0o755))
	launchertest.Must(t, os.Chown(meta, int(env.Cred.Uid), int(env.Cred.Gid)))
	mp.prepareTarget(t)
	if hooks != strings.Contains(mp.b.Stderr.String(), `"msg":"pre-migration hook server listening"`) {
		t.Fatalf("with hooks %v, the target's hook server:\n%s", hooks, launchertest.Tail(mp.b.Stderr.String(), 3000))
	}
	launchertest.Must(t, mp.ca.Migrate(mp.ctx, mp.vm, migration.Options{ProgressTimeout: 150, CompletionTimeoutPerGiB: 150}))
	if m := waitMigrationOf(t, mp.ctx, mp.ca, "mig-1", 3*time.Minute); m.Failed {
		t.Fatalf("the migration failed: %+v\ntarget:\n%s", m, launchertest.Tail(mp.b.Stderr.String(), 3000))
	}
	if hooks != strings.Contains(mp.b.Stderr.String(), `"msg":"pre-migration hook: the incoming domain XML edited"`) {
		t.Errorf("with hooks %v, the target's hook server:\n%s", hooks, launchertest.Tail(mp.b.Stderr.String(), 3000))
	}
	if !hooks && !strings.Contains(mp.a.Stderr.String(), `"msg":"dedicated CPUs: the destination's placement on the target's CPU set"`) {
		t.Errorf("the source did not place the CPUs for the target:\n%s", launchertest.Tail(mp.a.Stderr.String(), 3000))
	}
	if _, err := os.Stat(inPod(mp.b, socket)); !os.IsNotExist(err) {
		t.Errorf("the hook server's socket is still there after its call: %v", err)
	}
	launchertest.Must(t, mp.cb.FinalizeMigration(mp.ctx, mp.vm, nil))
	last := testguest.Counts(mp.a.Console())
	mp.b.WaitConsole("VL-COUNT-"+strconv.Itoa(last[len(last)-1]+5), time.Minute)
	d, _, err := mp.cb.GetDomain(mp.ctx)
	launchertest.Must(t, err)
	if d.Spec.CPUTune == nil || len(d.Spec.CPUTune.VCPUPin) != 1 || d.Spec.CPUTune.VCPUPin[0].CPUSet != dstCPU {
		t.Errorf("the target's domain cputune %+v, want vCPU 0 on %s", d.Spec.CPUTune, dstCPU)
	}
	vcpus := 0
	for thread, allowed := range threadAffinity(t, mp.b.QemuPid()) {
		if _, name, _ := strings.Cut(thread, " "); vcpuThread.MatchString(name) {
			vcpus++
			if allowed != dstCPU {
				t.Errorf("the target's vCPU thread %s may run on %q, want %q", thread, allowed, dstCPU)
			}
		}
	}
	if vcpus != 1 {
		t.Errorf("%d vCPU threads in the target's QEMU, want 1", vcpus)
	}
	if _, err := os.Stat(filepath.Join(meta, "migrated")); err != nil {
		t.Errorf("the source left no migrated marker: %v", err)
	}
}
