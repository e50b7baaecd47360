package premigration

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// source is an incoming domain as the source sends it: pinned to the
// source pod's CPUs 2 and 3.
const source = `<domain type="qemu"><name>ns_vm</name><memory unit="KiB">131072</memory>` +
	`<vcpu placement="static">2</vcpu><cputune><vcpupin vcpu="0" cpuset="2"></vcpupin><vcpupin vcpu="1" cpuset="3"></vcpupin></cputune>` +
	`<cpu mode="maximum"><topology sockets="1" dies="1" cores="2" threads="1"></topology></cpu>` +
	`<devices><disk type="file" device="disk"><source file="/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2"></source><target dev="vda" bus="virtio"></target></disk></devices></domain>`

// target is this pod's conversion: CPUs 0 and 1, an emulator thread pin.
func target() *libvirtxml.Domain {
	return &libvirtxml.Domain{
		VCPU: &libvirtxml.DomainVCPU{Placement: "static", Value: 2},
		CPU:  &libvirtxml.DomainCPU{Mode: "host-model", Topology: &libvirtxml.DomainCPUTopology{Sockets: 1, Dies: 1, Cores: 1, Threads: 2}},
		CPUTune: &libvirtxml.DomainCPUTune{VCPUPin: []libvirtxml.DomainCPUTuneVCPUPin{{VCPU: 0, CPUSet: "0"}, {VCPU: 1, CPUSet: "1"}},
			EmulatorPin: &libvirtxml.DomainCPUTuneEmulatorPin{CPUSet: "0"}},
	}
}

// dedicated is a VMI with dedicated CPUs in namespace ns.
func dedicated() *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns"},
		Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{CPU: &v1.CPU{DedicatedCPUPlacement: true}}}}
}

func TestDedicatedCPUs(t *testing.T) {
	if h := DedicatedCPUs(&v1.VirtualMachineInstance{}, target()); h != nil {
		t.Error("a hook for a VMI without dedicated CPUs")
	}
	var out bytes.Buffer
	if err := Exchange(strings.NewReader(source), &out, DedicatedCPUs(dedicated(), target())); err != nil {
		t.Fatal(err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(out.String()); err != nil {
		t.Fatal(err)
	}
	if pins := dom.CPUTune.VCPUPin; len(pins) != 2 || pins[0].CPUSet != "0" || pins[1].CPUSet != "1" || dom.CPUTune.EmulatorPin == nil {
		t.Errorf("cputune %+v, want the target's CPUs 0, 1 and its emulator pin", dom.CPUTune)
	}
	if dom.CPU.Mode != "maximum" || dom.CPU.Topology.Threads != 2 {
		t.Errorf("cpu %+v: want the source's mode with the target's topology", dom.CPU)
	}
	if dom.Name != "ns_vm" || len(dom.Devices.Disks) != 1 || dom.Memory.Value != 131072 {
		t.Errorf("the rest of the domain changed: %s", out.String())
	}
	if err := Exchange(strings.NewReader("<domain><name>"), io.Discard); err == nil {
		t.Error("a truncated XML was taken")
	}
}

// TestServeAndCall: the hook client's "migrate begin" through the server
// and back (one call, then the server is gone with its socket); with no
// server the client leaves the XML alone; a server that fails makes the
// client fail; "release end migrated" leaves the marker.
func TestServeAndCall(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "migration-hook-socket")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	args := []string{"ns_vm", "migrate", "begin", "-"}

	var out bytes.Buffer
	if err := Call(args, strings.NewReader(source), &out, sock, ""); err != nil || out.Len() != 0 {
		t.Fatalf("no server: %v, %q; want no error and no output (libvirt keeps the XML)", err, out.String())
	}

	srv, err := Serve(context.Background(), sock, log)
	if err != nil {
		t.Fatal(err)
	}
	// The hooks of the latest preparation count.
	srv.SetHooks(DedicatedCPUs(dedicated(), target()), nil)
	if err := Call(args, strings.NewReader(source), &out, sock, ""); err != nil {
		t.Fatalf("call: %v", err)
	}
	if !strings.Contains(out.String(), `<vcpupin vcpu="1" cpuset="1">`) {
		t.Errorf("the answer does not carry the target's CPUs: %s", out.String())
	}
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not stop after its call")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there: %v", err)
	}

	srv, err = Serve(context.Background(), sock, log)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := Call(args, strings.NewReader("not XML"), &out, sock, ""); err == nil || !strings.Contains(err.Error(), "no domain XML came back") {
		t.Errorf("a failing server: %v, %q", err, out.String())
	}
	<-srv.Done()

	ctx, cancel := context.WithCancel(context.Background())
	srv, err = Serve(ctx, sock, log)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not stop with its context")
	}

	marker := filepath.Join(dir, "meta", "migrated")
	if err := Call([]string{"ns_vm", "release", "end", "migrated"}, nil, nil, sock, marker); err != nil {
		t.Fatalf("marker without its directory: %v", err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a marker was made without its directory: %v", err)
	}
	if err := os.Mkdir(filepath.Dir(marker), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Call([]string{"ns_vm", "release", "end", "migrated"}, nil, nil, sock, marker); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(marker); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the migrated marker: %v, %v", fi, err)
	}
	if err := Call([]string{"ns_vm", "start", "begin", "-"}, strings.NewReader(source), &out, sock, marker); err != nil {
		t.Errorf("another operation: %v", err)
	}
}

func TestDiskSourcePaths(t *testing.T) {
	str := func(s string) *string { return &s }
	disk := func(file, store string) libvirtxml.DomainDisk {
		d := libvirtxml.DomainDisk{Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: file}}}
		if store != "" {
			d.Source.DataStore = &libvirtxml.DomainDiskDataStore{Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: store}}}
		}
		return d
	}
	for _, tc := range []struct {
		name     string
		src, dst *string // the states' domain namespaces
		in, want []libvirtxml.DomainDisk
	}{
		{name: "no target namespace", in: []libvirtxml.DomainDisk{disk("/pvc/ns/disk.img", "")}},
		{name: "the same namespace", dst: str("ns"), in: []libvirtxml.DomainDisk{disk("/pvc/ns/disk.img", "")}},
		{name: "the VMI's namespace to another", dst: str("other"),
			in:   []libvirtxml.DomainDisk{disk("/pvc/ns/ns/disk.img", "/x/ns/data.raw"), disk("/pvc/nsx/disk.img", ""), {Source: &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: "/dev/ns/b"}}}, {}},
			want: []libvirtxml.DomainDisk{disk("/pvc/other/ns/disk.img", "/x/other/data.raw"), disk("/pvc/nsx/disk.img", ""), {Source: &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: "/dev/ns/b"}}}, {}}},
		{name: "the source state's namespace", src: str("a"), dst: str("b"),
			in:   []libvirtxml.DomainDisk{disk("/pvc/ns/a/disk.img", "")},
			want: []libvirtxml.DomainDisk{disk("/pvc/ns/b/disk.img", "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := dedicated()
			v.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{
				SourceState: &v1.VirtualMachineInstanceMigrationSourceState{VirtualMachineInstanceCommonMigrationState: v1.VirtualMachineInstanceCommonMigrationState{DomainNamespace: tc.src}},
				TargetState: &v1.VirtualMachineInstanceMigrationTargetState{VirtualMachineInstanceCommonMigrationState: v1.VirtualMachineInstanceCommonMigrationState{DomainNamespace: tc.dst}},
			}
			h := DiskSourcePaths(v)
			if (h == nil) != (tc.want == nil) {
				t.Fatalf("hook %v, want one: %v", h != nil, tc.want != nil)
			}
			if h == nil {
				return
			}
			dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: tc.in}}
			if err := h(dom); err != nil {
				t.Fatal(err)
			}
			got, _ := (&libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: dom.Devices.Disks}}).Marshal()
			want, _ := (&libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: tc.want}}).Marshal()
			if got != want {
				t.Errorf("disks\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestOrdinalTapNames(t *testing.T) {
	v := dedicated()
	v.Spec.Networks = []v1.Network{
		{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}},
		{Name: "blue", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "blue-nad"}}},
		{Name: "main", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "m", Default: true}}},
	}
	iface := func(tap, alias string) libvirtxml.DomainInterface {
		i := libvirtxml.DomainInterface{Target: &libvirtxml.DomainInterfaceTarget{Dev: tap}}
		if alias != "" {
			i.Alias = &libvirtxml.DomainAlias{Name: alias}
		}
		return i
	}
	for _, tc := range []struct {
		name string
		in   libvirtxml.DomainInterface
		want string // the tap after, or the error
	}{
		{"tap0 stays", iface("tap0", "ua-default"), "tap0"},
		{"hashed stays", iface("tap16477688c0e", "ua-blue"), "tap16477688c0e"},
		{"not a tap", iface("vnet3", "ua-blue"), "vnet3"},
		{"ordinal secondary", iface("tap1", "ua-blue"), "tap16477688c0e"},
		{"ordinal Multus default", iface("tap2", "ua-main"), "tap0"},
		{"no target", libvirtxml.DomainInterface{Alias: &libvirtxml.DomainAlias{Name: "ua-blue"}}, ""},
		{"no alias", iface("tap1", ""), "error: no alias"},
		{"alias not ua-", iface("tap1", "net1"), "error: is not ua-"},
		{"pod network", iface("tap3", "ua-default"), "error: no Multus network"},
		{"unknown network", iface("tap3", "ua-red"), "error: no Multus network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dom := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Interfaces: []libvirtxml.DomainInterface{tc.in}}}
			err := OrdinalTapNames(v)(dom)
			if want, ok := strings.CutPrefix(tc.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want one saying %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if tg := dom.Devices.Interfaces[0].Target; tg != nil {
				got = tg.Dev
			}
			if got != tc.want {
				t.Errorf("tap %q, want %q", got, tc.want)
			}
		})
	}
}
