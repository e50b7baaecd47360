package devices

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// TestApply is the appliers over the in-memory fake: each case is a plan
// (made by PlanChanges where the VMI decides it) made to a domain, and
// what the domain, its definition and the calls show after.
func TestApply(t *testing.T) {
	dir := t.TempDir()
	hp := filepath.Join(dir, "hotplug")
	if err := os.MkdirAll(hp, 0o755); err != nil {
		t.Fatal(err)
	}
	volume := func(name string) string {
		p := filepath.Join(hp, name+".img")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	disk := func(name, dev, path string) libvirtxml.DomainDisk {
		d := libvirtxml.DomainDisk{Device: "disk", Alias: &libvirtxml.DomainAlias{Name: "ua-" + name},
			Target: &libvirtxml.DomainDiskTarget{Dev: dev, Bus: "scsi"}}
		if path != "" {
			d.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: path}}
		}
		return d
	}
	cdrom := func(name, path string) libvirtxml.DomainDisk {
		d := disk(name, "sdb", path)
		d.Device = "cdrom"
		return d
	}
	iface := func(name, link string) libvirtxml.DomainInterface {
		i := libvirtxml.DomainInterface{Alias: &libvirtxml.DomainAlias{Name: "ua-" + name},
			Target: &libvirtxml.DomainInterfaceTarget{Dev: "tap" + name},
			Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}}}
		if link != "" {
			i.Link = &libvirtxml.DomainInterfaceLink{State: link}
		}
		return i
	}
	withLink := func(i libvirtxml.DomainInterface, state string) libvirtxml.DomainInterface {
		i.Link = &libvirtxml.DomainInterfaceLink{State: state}
		return i
	}
	vmiIfaces := func(names ...string) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		for _, n := range names {
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: n})
		}
		return v
	}
	root := disk("root", "sda", filepath.Join(dir, "root.img"))
	hpOld := disk("old", "sdc", volume("old"))
	hpNew := disk("new", "sdd", volume("new"))
	missing := disk("gone", "sde", filepath.Join(hp, "not-mounted.img"))
	net1 := iface("net1", "")

	for _, tc := range []struct {
		name   string
		disks  []libvirtxml.DomainDisk
		ifaces []libvirtxml.DomainInterface
		// setup adds the case's faults to the fake.
		setup   func(f *fakeClient)
		network *fakeNetwork
		vmi     *v1.VirtualMachineInstance
		plan    Plan
		// wantLive and wantDef are the aliases after; wantCalls the calls
		// made; wantErr a part of the error ("" none).
		wantLive, wantDef []string
		wantCalls         []string
		wantErr           string
		wantChanged       bool
		wantServed        []string
	}{
		{
			name:  "a hotplugged disk the VMI dropped is detached from the running domain and the definition",
			disks: []libvirtxml.DomainDisk{root, hpOld}, plan: Plan{Detach: []libvirtxml.DomainDisk{hpOld}},
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root"},
			wantCalls: []string{"detach live+config ua-old"}, wantChanged: true,
		},
		{
			name:  "a disk the guest does not let go of fails the sync naming it once the wait is over",
			disks: []libvirtxml.DomainDisk{root, hpOld}, plan: Plan{Detach: []libvirtxml.DomainDisk{hpOld}},
			setup:    func(f *fakeClient) { f.held["ua-old"] = true },
			wantLive: []string{"ua-root", "ua-old"}, wantDef: []string{"ua-root"},
			wantCalls: []string{"detach live+config ua-old"}, wantChanged: true,
			wantErr: `sync: disk "old": detach requested, but QEMU still has it`,
		},
		{
			name:  "a disk the definition lost already (an earlier sync's detach) is asked for again in the running domain only",
			disks: []libvirtxml.DomainDisk{root, hpOld}, plan: Plan{Detach: []libvirtxml.DomainDisk{hpOld}},
			setup:    func(f *fakeClient) { f.def.Devices.Disks = f.def.Devices.Disks[:1] },
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root"},
			wantCalls: []string{"detach live ua-old"}, wantChanged: true,
		},
		{
			name:  "a refused detach of a disk the running domain lost already (a daemon that died) brings the definition along",
			disks: []libvirtxml.DomainDisk{root, hpOld}, plan: Plan{Detach: []libvirtxml.DomainDisk{hpOld}},
			setup: func(f *fakeClient) {
				f.live.Devices.Disks = f.live.Devices.Disks[:1]
				f.refuse["detach ua-old"] = errors.New("operation failed: disk sdc not found")
			},
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root"},
			wantCalls: []string{"detach live+config ua-old", "detach config ua-old"}, wantChanged: true,
		},
		{
			name:  "a refused detach of a disk the running domain still has fails the sync with libvirt's refusal",
			disks: []libvirtxml.DomainDisk{root, hpOld}, plan: Plan{Detach: []libvirtxml.DomainDisk{hpOld}},
			setup: func(f *fakeClient) {
				f.refuse["detach ua-old"] = errors.New("internal error: unable to execute QEMU command")
			},
			wantLive: []string{"ua-root", "ua-old"}, wantDef: []string{"ua-root", "ua-old"},
			wantCalls: []string{"detach live+config ua-old"}, wantChanged: true,
			wantErr: `sync: disk "old": detach the disk: internal error`,
		},
		{
			name:  "a mounted hotplug volume is attached live and in the definition",
			disks: []libvirtxml.DomainDisk{root}, plan: Plan{Attach: []libvirtxml.DomainDisk{hpNew}},
			wantLive: []string{"ua-root", "ua-new"}, wantDef: []string{"ua-root", "ua-new"},
			wantCalls: []string{"attach live+config ua-new"}, wantChanged: true,
		},
		{
			name:  "a volume not mounted yet is not attached: the sync fails saying so",
			disks: []libvirtxml.DomainDisk{root}, plan: Plan{Attach: []libvirtxml.DomainDisk{missing}},
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root"}, wantChanged: true,
			wantErr: `sync: disk "gone": volume not usable yet`,
		},
		{
			name:  "an attach libvirt accepts that the running domain does not show fails the sync",
			disks: []libvirtxml.DomainDisk{root}, plan: Plan{Attach: []libvirtxml.DomainDisk{hpNew}},
			setup:    func(f *fakeClient) { f.ignoreLive["ua-new"] = true },
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root", "ua-new"},
			wantCalls: []string{"attach live+config ua-new"}, wantChanged: true,
			wantErr: `sync: disk "new": libvirt accepted the attach, but the running domain does not have it`,
		},
		{
			name:  "a device a dead daemon left in QEMU is removed through the monitor and the attach made again",
			disks: []libvirtxml.DomainDisk{root}, plan: Plan{Attach: []libvirtxml.DomainDisk{hpNew}},
			setup: func(f *fakeClient) {
				f.refuse["attach ua-new"] = errors.New("internal error: unable to execute QEMU command 'device_add': Duplicate device ID 'ua-new' for device")
			},
			wantLive: []string{"ua-root", "ua-new"}, wantDef: []string{"ua-root", "ua-new"},
			wantCalls: []string{"attach live+config ua-new",
				`monitor {"execute":"qom-get","arguments":{"path":"/machine/peripheral/ua-new","property":"drive"}}`,
				`monitor {"execute":"device_del","arguments":{"id":"ua-new"}}`,
				`monitor {"execute":"qom-get","arguments":{"path":"/machine/peripheral/ua-new","property":"type"}}`,
				"attach live+config ua-new"},
			wantChanged: true,
		},
		{
			name:  "a CD-ROM whose volume is gone from the VMI has its medium ejected, live and in the definition",
			disks: []libvirtxml.DomainDisk{root, cdrom("cd", volume("cd"))}, plan: Plan{Media: []libvirtxml.DomainDisk{cdrom("cd", "")}},
			wantLive: []string{"ua-root", "ua-cd"}, wantDef: []string{"ua-root", "ua-cd"},
			wantCalls: []string{"update live+config ua-cd"}, wantChanged: true,
		},
		{
			name:   "a link the VMI sets down is set down and read back",
			ifaces: []libvirtxml.DomainInterface{net1}, plan: Plan{Links: []libvirtxml.DomainInterface{withLink(net1, "down")}},
			wantLive: []string{"ua-net1"}, wantDef: []string{"ua-net1"},
			wantCalls: []string{"update live+config ua-net1"}, wantChanged: true,
		},
		{
			name:   "a link state libvirt accepts but the running domain does not show fails the sync",
			ifaces: []libvirtxml.DomainInterface{net1}, plan: Plan{Links: []libvirtxml.DomainInterface{withLink(net1, "down")}},
			setup:    func(f *fakeClient) { f.ignoreLive["ua-net1"] = true },
			wantLive: []string{"ua-net1"}, wantDef: []string{"ua-net1"},
			wantCalls: []string{"update live+config ua-net1"}, wantChanged: true,
			wantErr: `sync: interface "net1": link down asked, libvirt reports up`,
		},
		{
			name:   "an interface the VMI marks absent is detached and no longer served",
			ifaces: []libvirtxml.DomainInterface{net1}, plan: Plan{Unplug: []libvirtxml.DomainInterface{net1}},
			network:   &fakeNetwork{served: []string{"net1"}},
			wantCalls: []string{"detach live+config ua-net1"}, wantChanged: true,
		},
		{
			name: "an interface to plug is served first, then attached live and in the definition",
			vmi:  vmiIfaces("net2"), plan: Plan{Plug: []string{"net2"}}, network: &fakeNetwork{},
			wantLive: []string{"ua-net2"}, wantDef: []string{"ua-net2"},
			wantCalls: []string{"attach live+config ua-net2"}, wantChanged: true, wantServed: []string{"net2"},
		},
		{
			name: "an interface whose attach fails is no longer served",
			vmi:  vmiIfaces("net2"), plan: Plan{Plug: []string{"net2"}}, network: &fakeNetwork{},
			setup:     func(f *fakeClient) { f.refuse["attach ua-net2"] = errors.New("internal error: no free PCI slot") },
			wantCalls: []string{"attach live+config ua-net2"}, wantChanged: true,
			wantErr: `sync: interface "net2" (tap tapnet2): attach the interface: internal error: no free PCI slot`,
		},
		{
			name: "an interface to plug in a launcher without a network phase is refused, nothing attached",
			vmi:  vmiIfaces("net2"), plan: Plan{Plug: []string{"net2"}}, wantChanged: true,
			wantErr: `sync: interface "net2": no network phase in this launcher to wire it`,
		},
		{
			name:  "a disk on a grown block device grows to the device's size",
			disks: []libvirtxml.DomainDisk{root}, plan: Plan{Grow: []growCandidate{{name: "root", target: "sda", path: root.Source.File.File, block: true}}},
			setup:    func(f *fakeClient) { f.sizes["sda"] = [2]uint64{1 << 30, 2 << 30} },
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root"},
			wantCalls: []string{"resize sda 2147483648"}, wantChanged: true,
		},
		{
			name:  "a disk whose device has its size already is left alone, and nothing changed",
			disks: []libvirtxml.DomainDisk{root}, plan: Plan{Grow: []growCandidate{{name: "root", target: "sda", path: root.Source.File.File, block: true}}},
			setup:    func(f *fakeClient) { f.sizes["sda"] = [2]uint64{1 << 30, 1 << 30} },
			wantLive: []string{"ua-root"}, wantDef: []string{"ua-root"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeClient(tc.disks, tc.ifaces)
			if tc.setup != nil {
				tc.setup(f)
			}
			a := &Applier{Client: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), HotplugDir: hp, wait: 300 * time.Millisecond}
			if tc.network != nil {
				a.Network = tc.network
			}
			v := tc.vmi
			if v == nil {
				v = &v1.VirtualMachineInstance{}
			}
			changed, err := a.Apply(context.Background(), v, tc.plan)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Apply: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Apply: error %v, want one with %q", err, tc.wantErr)
			}
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if got := aliases(f.live); !slices.Equal(got, tc.wantLive) {
				t.Errorf("running domain has %q, want %q", got, tc.wantLive)
			}
			if got := aliases(f.def); !slices.Equal(got, tc.wantDef) {
				t.Errorf("definition has %q, want %q", got, tc.wantDef)
			}
			if !slices.Equal(f.calls, tc.wantCalls) {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(tc.wantCalls, "\n"))
			}
			if tc.network != nil && !slices.Equal(tc.network.served, tc.wantServed) {
				t.Errorf("served %q, want %q", tc.network.served, tc.wantServed)
			}
		})
	}
}

// TestFollowDefinition: a definition a dead daemon left apart from the
// running domain's hotplugged disks is brought back to it.
func TestFollowDefinition(t *testing.T) {
	hp := "/hp"
	disk := func(name string) libvirtxml.DomainDisk {
		return libvirtxml.DomainDisk{Device: "disk", Alias: &libvirtxml.DomainAlias{Name: "ua-" + name},
			Target: &libvirtxml.DomainDiskTarget{Dev: "sd" + name, Bus: "scsi"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: hp + "/" + name + ".img"}}}
	}
	for _, tc := range []struct {
		name            string
		live, def       []libvirtxml.DomainDisk
		wantDef         []string
		wantCalls       []string
		wantRepaired    bool
		refuse, wantErr string
	}{
		{name: "a definition in step is left alone", live: []libvirtxml.DomainDisk{disk("a")}, def: []libvirtxml.DomainDisk{disk("a")}, wantDef: []string{"ua-a"}},
		{name: "a disk only the definition has is detached from it", live: nil, def: []libvirtxml.DomainDisk{disk("a")},
			wantCalls: []string{"detach config ua-a"}, wantRepaired: true},
		{name: "a disk only the running domain has is attached to the definition", live: []libvirtxml.DomainDisk{disk("a")},
			wantDef: []string{"ua-a"}, wantCalls: []string{"attach config ua-a"}, wantRepaired: true},
		{name: "a definition that cannot follow fails the sync naming the disk", live: []libvirtxml.DomainDisk{disk("a")},
			refuse: "attach ua-a", wantCalls: []string{"attach config ua-a"},
			wantErr: `sync: disk "a": attach it in the definition, as the running domain has it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeClient(tc.live, nil)
			f.def.Devices.Disks = slices.Clone(tc.def)
			if tc.refuse != "" {
				f.refuse[tc.refuse] = errors.New("operation failed")
			}
			a := &Applier{Client: f, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), HotplugDir: hp}
			live, err := f.XML(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			repaired, err := a.FollowDefinition(context.Background(), live)
			if repaired != tc.wantRepaired {
				t.Errorf("FollowDefinition says repaired %v, want %v", repaired, tc.wantRepaired)
			}
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("FollowDefinition: error %v, want %q", err, tc.wantErr)
			}
			if got := aliases(f.def); tc.wantErr == "" && !slices.Equal(got, tc.wantDef) {
				t.Errorf("definition has %q, want %q", got, tc.wantDef)
			}
			if !slices.Equal(f.calls, tc.wantCalls) {
				t.Errorf("calls %q, want %q", f.calls, tc.wantCalls)
			}
		})
	}
}
