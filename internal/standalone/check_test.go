package standalone

import (
	"strings"
	"testing"
	"time"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
)

func TestRunPolicy(t *testing.T) {
	yes, no := true, false
	strat := func(s v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
		return &v1.VirtualMachine{Spec: v1.VirtualMachineSpec{RunStrategy: &s}}
	}
	running := func(b *bool) *v1.VirtualMachine { return &v1.VirtualMachine{Spec: v1.VirtualMachineSpec{Running: b}} }
	both := strat(v1.RunStrategyAlways)
	both.Spec.Running = &yes
	for _, tc := range []struct {
		name  string
		vm    *v1.VirtualMachine
		force bool
		want  restartPolicy
		err   string
	}{
		{name: "a VMI runs once", vm: nil},
		{name: "a VM with neither field runs once", vm: &v1.VirtualMachine{}},
		{name: "running: true is Always", vm: running(&yes), want: restartPolicy{true, true}},
		{name: "Always", vm: strat(v1.RunStrategyAlways), want: restartPolicy{true, true}},
		{name: "RerunOnFailure", vm: strat(v1.RunStrategyRerunOnFailure), want: restartPolicy{afterFailure: true}},
		{name: "Once", vm: strat(v1.RunStrategyOnce)},
		{name: "Manual: the run is the start", vm: strat(v1.RunStrategyManual)},
		{name: "Halted is refused", vm: strat(v1.RunStrategyHalted), err: "spec.runStrategy: Halted: the VM is to stay stopped; start it anyway with --force-start"},
		{name: "running: false is refused", vm: running(&no), err: "spec.running: false: the VM is to stay stopped; start it anyway with --force-start"},
		{name: "Halted with --force-start runs once", vm: strat(v1.RunStrategyHalted), force: true},
		{name: "WaitAsReceiver", vm: strat(v1.RunStrategyWaitAsReceiver), err: "waits for a migration"},
		{name: "unknown", vm: strat("Sometimes"), err: "spec.runStrategy: Sometimes: not a run strategy"},
		{name: "both fields", vm: both, err: "give one of them"},
	} {
		got, err := runPolicy(tc.vm, tc.force)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestRestartDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 0, 1: time.Second, 2: 2 * time.Second, 5: 16 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 100: 5 * time.Minute} {
		if got := restartDelay(n); got != want {
			t.Errorf("restartDelay(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestMemoryWarning(t *testing.T) {
	with := func(guest, request string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		if guest != "" {
			q := resource.MustParse(guest)
			v.Spec.Domain.Memory = &v1.Memory{Guest: &q}
		}
		if request != "" {
			v.Spec.Domain.Resources.Requests = k8sv1.ResourceList{"memory": resource.MustParse(request)}
		}
		return v
	}
	for _, tc := range []struct {
		vmi  *v1.VirtualMachineInstance
		want string
	}{
		{with("1Mi", ""), "spec.domain.memory.guest 1Mi: guests need at least 64Mi"},
		{with("", "16Mi"), "spec.domain.resources.requests.memory 16Mi"},
		{with("64Mi", "1Mi"), ""},
		{with("", "256Mi"), ""},
		{with("", ""), ""},
	} {
		got := memoryWarning(tc.vmi)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("memoryWarning = %q, want %q", got, tc.want)
		}
	}
}

func TestRunUnsupported(t *testing.T) {
	v := &v1.VirtualMachineInstance{}
	if err := runUnsupported(v); err != nil {
		t.Errorf("plain VMI: %v", err)
	}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "vf", InterfaceBindingMethod: v1.InterfaceBindingMethod{SRIOV: &v1.InterfaceSRIOV{}}}}
	if err := runUnsupported(v); err == nil || !strings.Contains(err.Error(), "spec.domain.devices.interfaces[0].sriov: vlctl run does not pass SR-IOV virtual functions through") {
		t.Errorf("SR-IOV: %v", err)
	}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Binding: &v1.PluginBinding{Name: "mybind"}}}
	if err := runUnsupported(v); err == nil || !strings.Contains(err.Error(), "spec.domain.devices.interfaces[0].binding: vlctl run has no network binding plugins") {
		t.Errorf("binding plugin: %v", err)
	}
}

// TestRunCPUs: --cpuset against the VMI and the CPUs vlctl may use.
func TestRunCPUs(t *testing.T) {
	dedicated := func(sockets uint32, isolate bool) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{
			CPU: &v1.CPU{Sockets: sockets, Cores: 1, Threads: 1, DedicatedCPUPlacement: true, IsolateEmulatorThread: isolate}}}}
	}
	mayUse := []uint{0, 1, 2, 3}
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		cpus []uint
		err  string
	}{
		{name: "plain VMI, no flag", vmi: &v1.VirtualMachineInstance{}},
		{name: "plain VMI confined", vmi: &v1.VirtualMachineInstance{}, cpus: []uint{3}},
		{name: "dedicated without the flag", vmi: dedicated(1, false),
			err: "spec.domain.cpu.dedicatedCpuPlacement: vlctl run has no CPU manager: give the VM its host CPUs with --cpuset LIST (e.g. --cpuset 2-3; this machine lets vlctl use 0-3)"},
		{name: "dedicated", vmi: dedicated(2, false), cpus: []uint{2, 3}},
		{name: "dedicated, isolated emulator", vmi: dedicated(1, true), cpus: []uint{0, 1}},
		{name: "too few", vmi: dedicated(2, true), cpus: []uint{2, 3},
			err: "--cpuset: 2-3 is 2 CPUs; the VM's dedicated CPUs need 3 (one per vCPU, one more for isolateEmulatorThread)"},
		{name: "not ours", vmi: dedicated(1, false), cpus: []uint{7}, err: "--cpuset: CPU 7 is not one vlctl may use (0-3)"},
	} {
		err := runCPUs(tc.vmi, tc.cpus, mayUse)
		if (tc.err == "") != (err == nil) || (err != nil && err.Error() != tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// TestHostPathsMigrated: a run that takes a guest over by migration may use
// its source's hostDisks (that run was allowed them) without
// --allow-host-path, and nothing else.
func TestHostPathsMigrated(t *testing.T) {
	src := &v1.VirtualMachineInstance{}
	src.Spec.Volumes = []v1.Volume{
		{Name: "d", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/srv/vm/d.img", Type: v1.HostDiskExists}}},
		{Name: "p", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}},
	}
	cfg := session{Config: Config{StorageOptions: StorageOptions{AllowHostPaths: []string{"/data"}, HostPathOwner: 1000}}, guest: migrationIn{src: &runrecord.Entry{Record: runrecord.Record{VMI: src}}}}
	hp := cfg.hostPaths()
	if hp.Owner != 1000 {
		t.Errorf("owner %d, want 1000", hp.Owner)
	}
	for path, want := range map[string]bool{"/srv/vm/d.img": true, "/data/x.img": true, "/srv/other.img": false, "/srv/vm": false} {
		if _, ok := hp.AllowedDir(path); ok != want {
			t.Errorf("%s allowed: %v, want %v", path, ok, want)
		}
	}
	if dir, _ := hp.AllowedDir("/srv/vm/d.img"); dir != "/srv/vm" {
		t.Errorf("the source's hostDisk is allowed below %q, want /srv/vm", dir)
	}
	specs, err := userstorage.Plan(src, nil, []userstorage.VolumeMap{{Name: "c", Path: "/srv/c.img"}}, hp)
	if err != nil || len(specs) != 2 {
		t.Errorf("plan %+v, %v; want the hostDisk and the claim", specs, err)
	}
}
