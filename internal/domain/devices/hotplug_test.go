package devices

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// TestHotplugs is the hotplugs besides Sync (vCPUs, memory, SR-IOV host
// devices) over the in-memory fake: each case is one change made to a
// domain, and what the domain and the calls show after.
func TestHotplugs(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	memVMI := func(guest string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Memory = &v1.Memory{Guest: q(guest), MaxGuest: q("4Gi")}
		v.Status.Memory = &v1.MemoryStatus{GuestAtBoot: q("1Gi")}
		return v
	}
	withMem := func(requestedKiB uint) func(f *fakeClient) {
		return func(f *fakeClient) {
			f.live.Devices.Memorydevs = []libvirtxml.DomainMemorydev{{
				Model: "virtio-mem", Alias: &libvirtxml.DomainAlias{Name: "virtiomem0"},
				Target: &libvirtxml.DomainMemorydevTarget{
					Size:      &libvirtxml.DomainMemorydevTargetSize{Value: 3 << 20, Unit: "KiB"},
					Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: requestedKiB, Unit: "KiB"},
				}}}
		}
	}
	vf := func(name string, fn uint) libvirtxml.DomainHostdev {
		bus, zero := uint(0x3b), uint(0)
		return libvirtxml.DomainHostdev{Managed: "no", Alias: &libvirtxml.DomainAlias{Name: "ua-sriov-" + name},
			SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{Source: &libvirtxml.DomainHostdevSubsysPCISource{
				Address: &libvirtxml.DomainAddressPCI{Domain: &zero, Bus: &bus, Slot: &zero, Function: &fn}}}}
	}
	vcpus := func(live, maximum uint64) func(f *fakeClient) {
		return func(f *fakeClient) { f.vcpus, f.maxVCPUs = live, maximum }
	}
	// requested is the virtio-mem device's requested size, "" for none.
	requested := func(d *libvirtxml.Domain) string {
		if m, ok := virtioMem(d); ok {
			return resource.NewQuantity(int64(m.Target.Requested.Value)<<10, resource.BinarySI).String()
		}
		return ""
	}

	for _, tc := range []struct {
		name  string
		setup func(f *fakeClient)
		// change makes the change to the applier.
		change func(ctx context.Context, a *Applier) (bool, error)
		// wantVCPUs is the live vCPU count after (0: not looked at),
		// wantMem the device's requested size ("" none), wantHostdevs
		// the host devices' aliases, running and defined.
		wantVCPUs    uint64
		wantMem      string
		wantHostdevs []string
		wantCalls    []string
		wantErr      string
		wantChanged  bool
	}{
		{
			name: "vCPUs hotplugged up to what the VMI asks", setup: vcpus(2, 8),
			change:    func(ctx context.Context, a *Applier) (bool, error) { return a.SetVCPUs(ctx, 4) },
			wantVCPUs: 4, wantCalls: []string{"set vCPUs 4"}, wantChanged: true,
		},
		{
			name: "a vCPU the guest lets go of is unplugged", setup: vcpus(4, 8),
			change:    func(ctx context.Context, a *Applier) (bool, error) { return a.SetVCPUs(ctx, 2) },
			wantVCPUs: 2, wantCalls: []string{"set vCPUs 2"}, wantChanged: true,
		},
		{
			name: "vCPUs as the VMI asks already: nothing done", setup: vcpus(4, 8),
			change:    func(ctx context.Context, a *Applier) (bool, error) { return a.SetVCPUs(ctx, 4) },
			wantVCPUs: 4,
		},
		{
			name: "more vCPUs than the domain's maximum are refused, nothing asked of libvirt", setup: vcpus(2, 8),
			change:    func(ctx context.Context, a *Applier) (bool, error) { return a.SetVCPUs(ctx, 9) },
			wantVCPUs: 2, wantErr: "update vCPUs: the VMI asks for 9 vCPUs (sockets x cores x threads), more than the 8",
		},
		{
			name: "a vCPU the guest does not let go of fails the call once the wait is over",
			setup: func(f *fakeClient) {
				vcpus(4, 8)(f)
				f.vcpusHeld = true
			},
			change:    func(ctx context.Context, a *Applier) (bool, error) { return a.SetVCPUs(ctx, 2) },
			wantVCPUs: 4, wantCalls: []string{"set vCPUs 2"}, wantErr: "update vCPUs: 2 asked, the domain has 4",
		},
		{
			name: "a growth libvirt refuses fails with its refusal",
			setup: func(f *fakeClient) {
				vcpus(2, 8)(f)
				f.refuse["set vCPUs"] = errors.New("internal error: unable to execute QEMU command 'device_add'")
			},
			change:    func(ctx context.Context, a *Applier) (bool, error) { return a.SetVCPUs(ctx, 4) },
			wantVCPUs: 2, wantCalls: []string{"set vCPUs 4"}, wantErr: "update vCPUs from 2 to 4: set the vCPUs: internal error",
		},
		{
			name:  "the first memory growth attaches the virtio-mem device, live and in the definition",
			setup: func(f *fakeClient) { f.version = 8_002_000 },
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.SetMemory(ctx, memVMI("2Gi"))
			},
			wantMem: "1Gi", wantCalls: []string{"attach live+config virtiomem0"}, wantChanged: true,
		},
		{
			name:  "no virtio-mem device is attached on a QEMU that crashes doing it",
			setup: func(f *fakeClient) { f.version = 7_002_022 },
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.SetMemory(ctx, memVMI("2Gi"))
			},
			wantErr: "attaching one crashes QEMU 7.2.22 (the guest would die)",
		},
		{
			name:  "a further growth updates the device's requested size in the running domain",
			setup: withMem(1 << 20),
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.SetMemory(ctx, memVMI("3Gi"))
			},
			wantMem: "2Gi", wantCalls: []string{"update live virtiomem0"}, wantChanged: true,
		},
		{
			name:  "memory as the VMI asks already: nothing done",
			setup: withMem(1 << 20),
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.SetMemory(ctx, memVMI("2Gi"))
			},
			wantMem: "1Gi",
		},
		{
			name: "a size libvirt accepts but the running domain does not show fails the call",
			setup: func(f *fakeClient) {
				withMem(1 << 20)(f)
				f.ignoreLive["virtiomem0"] = true
			},
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.SetMemory(ctx, memVMI("3Gi"))
			},
			wantMem: "1Gi", wantCalls: []string{"update live virtiomem0"},
			wantErr: "update guest memory: 2097152 KiB asked above the boot size, libvirt reports 1048576 KiB",
		},
		{
			name: "SR-IOV functions are attached live and in the definition, in order",
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.AttachHostdevs(ctx, []libvirtxml.DomainHostdev{vf("net1", 1), vf("net2", 2)})
			},
			wantHostdevs: []string{"ua-sriov-net1", "ua-sriov-net2"},
			wantCalls:    []string{"attach live+config ua-sriov-net1", "attach live+config ua-sriov-net2"}, wantChanged: true,
		},
		{
			name:  "an SR-IOV function libvirt refuses fails the call naming it, after the ones before",
			setup: func(f *fakeClient) { f.refuse["attach ua-sriov-net2"] = errors.New("internal error: no free PCI slot") },
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.AttachHostdevs(ctx, []libvirtxml.DomainHostdev{vf("net1", 1), vf("net2", 2), vf("net3", 3)})
			},
			wantHostdevs: []string{"ua-sriov-net1"},
			wantCalls:    []string{"attach live+config ua-sriov-net1", "attach live+config ua-sriov-net2"},
			wantErr:      "hot-plug host devices: ua-sriov-net2: attach the host device: internal error: no free PCI slot",
		},
		{
			name: "no SR-IOV function to attach: nothing done",
			change: func(ctx context.Context, a *Applier) (bool, error) {
				return a.AttachHostdevs(ctx, nil)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeClient(nil, nil)
			if tc.setup != nil {
				tc.setup(f)
			}
			a := &Applier{Client: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), wait: 300 * time.Millisecond}
			changed, err := tc.change(context.Background(), a)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one with %q", err, tc.wantErr)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if tc.wantVCPUs != 0 && f.vcpus != tc.wantVCPUs {
				t.Errorf("the domain has %d vCPUs, want %d", f.vcpus, tc.wantVCPUs)
			}
			if got := requested(f.live); got != tc.wantMem {
				t.Errorf("the running domain's virtio-mem device requests %q, want %q", got, tc.wantMem)
			}
			for _, dom := range []*libvirtxml.Domain{f.live, f.def} {
				var got []string
				for _, h := range dom.Devices.Hostdevs {
					got = append(got, aliasOf(h.Alias))
				}
				if !slices.Equal(got, tc.wantHostdevs) {
					t.Errorf("host devices %q, want %q", got, tc.wantHostdevs)
				}
			}
			if !slices.Equal(f.calls, tc.wantCalls) {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(tc.wantCalls, "\n"))
			}
		})
	}
}

func TestVCPUChange(t *testing.T) {
	tests := []struct {
		name                string
		want, live, maximum uint64
		change              bool
		wantErr             string
	}{
		{"no change", 2, 2, 8, false, ""},
		{"hotplug up", 4, 2, 8, true, ""},
		{"up to the maximum", 8, 2, 8, true, ""},
		{"unplug", 1, 2, 8, true, ""},
		{"beyond maxSockets", 9, 2, 8, false, "asks for 9 vCPUs (sockets x cores x threads), more than the 8"},
		{"none", 0, 2, 8, false, "asks for no vCPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			change, err := vcpuChange(tt.want, tt.live, tt.maximum)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("vcpuChange: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("vcpuChange: %v, want an error with %q", err, tt.wantErr)
			case change != tt.change:
				t.Errorf("vcpuChange = %v, want %v", change, tt.change)
			}
		})
	}
}

func TestMemoryChange(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	vmi := func(guest, maxGuest, boot string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Memory = &v1.Memory{Guest: q(guest)}
		if maxGuest != "" {
			v.Spec.Domain.Memory.MaxGuest = q(maxGuest)
		}
		if boot != "" {
			v.Status.Memory = &v1.MemoryStatus{GuestAtBoot: q(boot)}
		}
		return v
	}
	withMem := func(requestedKiB uint) *libvirtxml.Domain {
		return &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Memorydevs: []libvirtxml.DomainMemorydev{{
			Model: "virtio-mem", Alias: &libvirtxml.DomainAlias{Name: "virtiomem0"},
			Target: &libvirtxml.DomainMemorydevTarget{
				Size:      &libvirtxml.DomainMemorydevTargetSize{Value: 3 << 20, Unit: "KiB"},
				Requested: &libvirtxml.DomainMemorydevTargetRequested{Value: requestedKiB, Unit: "KiB"},
			}}}}}
	}
	none := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{}}
	for _, tc := range []struct {
		name         string
		vmi          *v1.VirtualMachineInstance
		live         *libvirtxml.Domain
		change       bool // a device to attach or update
		attach       bool
		requestedKiB uint // of the device to attach or update
		sizeKiB      uint // of a device to attach
		err          string
	}{
		{name: "first growth attaches the device", vmi: vmi("2Gi", "4Gi", "1Gi"), live: none, change: true, attach: true, requestedKiB: 1 << 20, sizeKiB: 3 << 20},
		{name: "at the boot size without a device: nothing", vmi: vmi("1Gi", "4Gi", "1Gi"), live: none},
		{name: "grows further: the device is updated", vmi: vmi("3Gi", "4Gi", "1Gi"), live: withMem(1 << 20), change: true, requestedKiB: 2 << 20},
		{name: "back down", vmi: vmi("1Gi", "4Gi", "1Gi"), live: withMem(1 << 20), change: true, requestedKiB: 0},
		{name: "as requested already", vmi: vmi("2Gi", "4Gi", "1Gi"), live: withMem(1 << 20)},
		{name: "no maxGuest", vmi: vmi("2Gi", "", "1Gi"), live: none, err: "maxGuest is not set"},
		{name: "no boot size", vmi: vmi("2Gi", "4Gi", ""), live: none, err: "guestAtBoot is not set"},
		{name: "beyond maxGuest", vmi: vmi("5Gi", "4Gi", "1Gi"), live: none, err: "guest 5Gi is more than maxGuest 4Gi"},
		{name: "below the boot size", vmi: vmi("512Mi", "4Gi", "1Gi"), live: none, err: "less than the 1Gi the VM booted with"},
		{name: "not in 2 MiB blocks", vmi: vmi("1025Mi", "4Gi", "1Gi"), live: none, err: "multiples of 2 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, attach, err := memoryChange(tc.vmi, tc.live)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("memoryChange: %v, want an error with %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatalf("memoryChange: %v", err)
			case !tc.change && dev != nil:
				t.Fatalf("memoryChange = %+v, want no change", dev)
			}
			if tc.change {
				if dev == nil || dev.Target.Requested.Value != tc.requestedKiB || attach != tc.attach {
					t.Fatalf("memoryChange = %+v (attach %v), want requested %d KiB (attach %v)", dev, attach, tc.requestedKiB, tc.attach)
				}
				if attach && (dev.Model != "virtio-mem" || dev.Target.Size.Value != tc.sizeKiB || dev.Target.Block.Value != 2048 || dev.Target.Node == nil) {
					t.Errorf("the device to attach: %+v", dev.Target)
				}
				if !attach && (dev.Alias == nil || dev.Alias.Name != "virtiomem0") {
					t.Errorf("the updated device lost its alias: %+v", dev)
				}
				if !attach && tc.live.Devices.Memorydevs[0].Target.Requested.Value == dev.Target.Requested.Value {
					t.Errorf("memoryChange changed the live domain")
				}
			}
		})
	}
}

func TestFormatQemuVersion(t *testing.T) {
	for v, want := range map[uint64]string{7002022: "QEMU 7.2.22", 7002000: "QEMU 7.2.0", 10001002: "QEMU 10.1.2"} {
		if got := FormatQemuVersion(v); got != want {
			t.Errorf("%d: %q, want %q", v, got, want)
		}
	}
}
