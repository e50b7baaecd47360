package domainjson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"libvirt.org/go/libvirtxml"
	kjson "sigs.k8s.io/json"

	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
)

// liveXML is shaped like what libvirt returns for a running KubeVirt-style
// domain: aliases with and without the ua- prefix, a tap interface, a
// file and a block disk, an empty cdrom, the guest agent channel.
const liveXML = `<domain type='qemu' id='1'>
  <name>ns1_vm1</name>
  <uuid>5a9fc181-957e-5c32-9e5a-2de5e9673531</uuid>
  <metadata><kubevirt xmlns="http://kubevirt.io"><uid/></kubevirt></metadata>
  <memory unit='KiB'>131072</memory>
  <currentMemory unit='KiB'>131072</currentMemory>
  <vcpu placement='static'>1</vcpu>
  <iothreads>1</iothreads>
  <cputune><emulatorpin cpuset='1'/></cputune>
  <sysinfo type='smbios'><system><entry name='manufacturer'>KubeVirt</entry></system></sysinfo>
  <os><type arch='x86_64' machine='pc-q35-7.2'>hvm</type><boot dev='hd'/><smbios mode='sysinfo'/></os>
  <features><acpi/><apic/><smm state='on'/></features>
  <cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model><topology sockets='1' dies='1' cores='1' threads='1'/></cpu>
  <clock offset='utc'><timer name='rtc' tickpolicy='catchup'/></clock>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='none' error_policy='stop' discard='unmap'/>
      <source file='/var/run/kubevirt-ephemeral-disks/disk-data/rootdisk/disk.qcow2' index='2'/>
      <target dev='vda' bus='virtio'/>
      <alias name='ua-rootdisk'/>
      <address type='pci' domain='0x0000' bus='0x04' slot='0x00' function='0x0'/>
    </disk>
    <disk type='block' device='disk'>
      <driver name='qemu' type='raw'/>
      <source dev='/dev/blk0'/>
      <target dev='vdb' bus='virtio'/>
      <readonly/>
      <alias name='ua-blk'/>
    </disk>
    <disk type='file' device='cdrom'>
      <target dev='sda' bus='sata' tray='open'/>
      <alias name='sata0-0-0'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>
    <controller type='usb' index='0' model='none'><alias name='usb'/></controller>
    <interface type='ethernet'>
      <mac address='02:00:00:aa:bb:cc'/>
      <target dev='tap0' managed='no'/>
      <model type='virtio-non-transitional'/>
      <driver name='vhost' queues='2'/>
      <mtu size='1500'/>
      <alias name='ua-default'/>
      <rom enabled='no'/>
      <address type='pci' domain='0x0000' bus='0x01' slot='0x00' function='0x0'/>
    </interface>
    <interface type='ethernet'>
      <target dev='tap1' managed='no'/>
      <link state='down'/>
    </interface>
    <serial type='unix'><source mode='bind' path='/run/kubevirt-private/U/virt-serial0'/><target type='isa-serial' port='0'/><alias name='serial0'/></serial>
    <console type='unix'><source mode='bind' path='/run/kubevirt-private/U/virt-serial0'/><target type='serial' port='0'/><alias name='serial0'/></console>
    <channel type='unix'>
      <source mode='bind' path='/run/libvirt/qemu/channel/1-ns1_vm1/org.qemu.guest_agent.0'/>
      <target type='virtio' name='org.qemu.guest_agent.0' state='connected'/>
      <alias name='channel0'/>
    </channel>
    <input type='mouse' bus='ps2'><alias name='input0'/></input>
    <graphics type='vnc'><listen type='socket' socket='/run/kubevirt-private/U/virt-vnc'/></graphics>
    <video><model type='vga' vram='16384' heads='1'/><alias name='video0'/></video>
    <watchdog model='i6300esb' action='poweroff'><alias name='ua-watchdog'/></watchdog>
    <memballoon model='virtio-non-transitional' freePageReporting='on'><stats period='10'/></memballoon>
    <rng model='virtio-non-transitional'><backend model='random'>/dev/urandom</backend></rng>
  </devices>
</domain>`

func parse(t *testing.T) *libvirtxml.Domain {
	t.Helper()
	var x libvirtxml.Domain
	if err := x.Unmarshal(liveXML); err != nil {
		t.Fatalf("parse fixture: %v", err)
	}
	return &x
}

// decodeKubeVirt decodes like virt-handler (case-sensitive) and fails on
// any key KubeVirt's structs do not have (see package kvshape).
func decodeKubeVirt(t *testing.T, data []byte) *kvshape.Domain {
	t.Helper()
	kv, err := kvshape.Decode(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return kv
}

func TestBuildDecodesAsKubeVirt(t *testing.T) {
	tru := true
	del := time.Date(2025, 1, 2, 3, 4, 5, 678000000, time.UTC)
	meta := Metadata{UID: "U", GracePeriodSeconds: 30, DeletionTimestamp: &del, MarkedForGracefulShutdown: &tru}
	d := Build("vm1", "ns1", parse(t), libvirt.DomainRunning, int32(libvirt.DomainRunningBooted), meta)
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	kv := decodeKubeVirt(t, data)

	check := func(name string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", name, got, want)
		}
	}
	check("kind", kv.Kind, "Domain")
	check("apiVersion", kv.APIVersion, "1.2.2")
	check("ObjectMeta.name", kv.ObjectMeta.Name, "vm1")
	check("ObjectMeta.namespace", kv.ObjectMeta.Namespace, "ns1")
	check("ObjectMeta.uid", kv.ObjectMeta.UID, "U")
	check("ObjectMeta.deletionTimestamp", kv.ObjectMeta.DeletionTimestamp, (*time.Time)(nil))
	check("Spec.Name", kv.Spec.Name, "ns1_vm1")
	check("Spec.Type", kv.Spec.Type, "qemu")
	check("Spec.XMLName", kv.Spec.XMLName, kvshape.XMLName{Local: "domain"})
	check("Spec.CurrentMemory", *kv.Spec.CurrentMemory, kvshape.Memory{Value: 131072, Unit: "KiB"})
	check("Spec.OS.Type.Machine", kv.Spec.OS.Type.Machine, "pc-q35-7.2")
	check("Spec.Features.ACPI", kv.Spec.Features.ACPI != nil, true)
	check("Spec.CPUTune.EmulatorPin", kv.Spec.CPUTune.EmulatorPin.CPUSet, "1")

	k := kv.Spec.Metadata.KubeVirt
	check("Metadata UID", k.UID, "U")
	check("GracePeriod seconds", k.GracePeriod.DeletionGracePeriodSeconds, int64(30))
	check("GracePeriod timestamp (second precision)", k.GracePeriod.DeletionTimestamp.Equal(del.Truncate(time.Second)), true)
	check("MarkedForGracefulShutdown", *k.GracePeriod.MarkedForGracefulShutdown, true)
	if !strings.Contains(string(data), `"DeletionTimestamp":"2025-01-02T03:04:05Z"`) {
		t.Errorf("timestamp not RFC 3339 with second precision in %s", data)
	}

	ifs := kv.Spec.Devices.Interfaces
	if len(ifs) != 2 {
		t.Fatalf("interfaces: %d", len(ifs))
	}
	check("iface0 alias", *ifs[0].Alias, kvshape.Alias{Name: "default", UserDefined: true})
	check("iface0 MAC", ifs[0].MAC.MAC, "02:00:00:aa:bb:cc")
	check("iface0 queues", *ifs[0].Driver.Queues, uint(2))
	check("iface0 target", ifs[0].Target.Device, "tap0")
	check("iface0 type", ifs[0].Type, "ethernet")
	check("iface1 has Alias object", ifs[1].Alias != nil, true)
	check("iface1 has MAC object", ifs[1].MAC != nil, true)
	check("iface1 link", ifs[1].LinkState.State, "down")

	disks := kv.Spec.Devices.Disks
	if len(disks) != 3 {
		t.Fatalf("disks: %d", len(disks))
	}
	check("disk0 alias", *disks[0].Alias, kvshape.Alias{Name: "rootdisk", UserDefined: true})
	check("disk0 file", disks[0].Source.File, "/var/run/kubevirt-ephemeral-disks/disk-data/rootdisk/disk.qcow2")
	check("disk0 target", disks[0].Target.Device, "vda")
	check("disk0 bus", disks[0].Target.Bus, "virtio")
	check("disk1 dev", disks[1].Source.Dev, "/dev/blk0")
	check("disk1 type", disks[1].Type, "block")
	check("disk1 readonly", disks[1].ReadOnly != nil, true)
	check("disk2 alias not user defined", *disks[2].Alias, kvshape.Alias{Name: "sata0-0-0"})
	check("disk2 no source", disks[2].Source.File+disks[2].Source.Dev, "")

	ch := kv.Spec.Devices.Channels
	if len(ch) != 1 || ch[0].Target == nil {
		t.Fatalf("channels: %+v", ch)
	}
	check("agent channel", [2]string{ch[0].Target.Name, ch[0].Target.State}, [2]string{"org.qemu.guest_agent.0", "connected"})

	check("Status.Status", kv.Status.Status, "Running")
	check("Status.Reason", kv.Status.Reason, "Unknown")
}

// TestMemoryDumpMetadata: the launcher's memory dump record reaches
// Spec.Metadata.KubeVirt.MemoryDump, which virt-handler compares with the
// volume's target file name and reads the outcome and times from.
func TestMemoryDumpMetadata(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	end := metav1.NewTime(start.Add(7 * time.Second))
	md := Metadata{UID: "U", MemoryDump: &MemoryDumpMetadata{FileName: "vm1-dump-20260102-030405.memory.dump",
		StartTimestamp: &start, EndTimestamp: &end, Completed: true, Failed: true, FailureReason: "Domain memory dump failed: no space"}}
	data, err := json.Marshal(Build("vm1", "ns1", parse(t), libvirt.DomainRunning, int32(libvirt.DomainRunningBooted), md))
	if err != nil {
		t.Fatal(err)
	}
	got := decodeKubeVirt(t, data).Spec.Metadata.KubeVirt.MemoryDump
	if got == nil {
		t.Fatalf("no MemoryDump in %s", data)
	}
	if got.FileName != md.MemoryDump.FileName || !got.Completed || !got.Failed || got.FailureReason != md.MemoryDump.FailureReason ||
		got.StartTimestamp == nil || !got.StartTimestamp.Equal(start.Time) || got.EndTimestamp == nil || !got.EndTimestamp.Equal(end.Time) {
		t.Errorf("MemoryDump = %+v, want %+v", got, md.MemoryDump)
	}
}

func TestGone(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 999, time.UTC)
	data, err := json.Marshal(Gone("vm1", "ns1", Metadata{UID: "U", GracePeriodSeconds: 5}, now))
	if err != nil {
		t.Fatal(err)
	}
	kv := decodeKubeVirt(t, data)
	if kv.ObjectMeta.DeletionTimestamp == nil || !kv.ObjectMeta.DeletionTimestamp.Equal(now.Truncate(time.Second)) {
		t.Errorf("deletionTimestamp = %v, want %v", kv.ObjectMeta.DeletionTimestamp, now)
	}
	if !strings.Contains(string(data), `"deletionTimestamp":"2026-03-04T05:06:07Z"`) {
		t.Errorf("deletionTimestamp key/format wrong in %s", data)
	}
	if kv.Status.Status != "NoState" || kv.Status.Reason != "NonExistent" {
		t.Errorf("status = %s/%s", kv.Status.Status, kv.Status.Reason)
	}
	if kv.Spec.Metadata.KubeVirt.UID != "U" || kv.ObjectMeta.Name != "vm1" || kv.ObjectMeta.Namespace != "ns1" {
		t.Errorf("identity lost: %+v %+v", kv.ObjectMeta, kv.Spec.Metadata.KubeVirt)
	}
}

// TestAllKeysPresent checks there is no omitempty: every field of every
// launcher-defined struct appears as a key, with nil encoded as null.
func TestAllKeysPresent(t *testing.T) {
	d := Build("vm1", "ns1", parse(t), libvirt.DomainPaused, int32(libvirt.DomainPausedUser), Metadata{UID: "U"})
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	checked := 0
	var walkFn func(path string, typ reflect.Type, v any)
	walkFn = func(path string, typ reflect.Type, v any) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeOf(Domain{}).PkgPath() || typ == reflect.TypeOf(Alias{}) {
			return
		}
		switch vv := v.(type) {
		case map[string]any:
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				if f.Anonymous {
					continue
				}
				key := f.Name
				if tag := f.Tag.Get("json"); tag != "" {
					key = strings.Split(tag, ",")[0]
				}
				checked++
				child, ok := vv[key]
				if !ok {
					t.Errorf("%s: key %q missing", path, key)
					continue
				}
				walkFn(path+"."+key, f.Type, child)
			}
		case []any:
			for i, e := range vv {
				walkFn(fmt.Sprintf("%s[%d]", path, i), typ, e)
			}
		}
	}
	walkFn("", reflect.TypeOf(Domain{}), m)
	if checked < 150 {
		t.Errorf("only %d keys checked; the walk is not reaching the devices", checked)
	}
	for _, k := range []string{"kind", "apiVersion", "ObjectMeta", "Spec", "Status"} {
		if _, ok := m[k]; !ok {
			t.Errorf("top-level key %q missing", k)
		}
	}
	if s := m["Status"].(map[string]any); s["Status"] != "Paused" || s["Reason"] != "User" {
		t.Errorf("status %v", s)
	}
}

// TestStrictDecoderCatchesMistakes shows the KubeVirt-shape decoding used
// above does reject a wrongly cased key and a wrong value type, so the
// tests that pass through it can fail.
func TestStrictDecoderCatchesMistakes(t *testing.T) {
	for _, bad := range []string{
		`{"spec":{}}`,                                        // wrongly cased
		`{"Spec":{"Features":{"ACPI":true}}}`,                // ACPI must be an object
		`{"Spec":{"Devices":{"Interfaces":[{"Mac":null}]}}}`, // MAC, not Mac
		`{"Spec":{"Metadata":{"KubeVirt":{"Uid":"U"}}}}`,     // UID, not Uid
		`{"Status":{"Status":"Running","Extra":1}}`,          // unknown key
	} {
		if _, err := kvshape.Decode([]byte(bad)); err == nil {
			t.Errorf("kvshape.Decode(%s) accepted it", bad)
		}
	}
}

func TestStateAndReason(t *testing.T) {
	cases := []struct {
		state           libvirt.DomainState
		reason          int32
		status, reason2 string
	}{
		{libvirt.DomainNostate, 0, "NoState", "Unknown"},
		{libvirt.DomainRunning, int32(libvirt.DomainRunningBooted), "Running", "Unknown"},
		{libvirt.DomainRunning, int32(libvirt.DomainRunningUnpaused), "Running", "Unknown"},
		{libvirt.DomainBlocked, 0, "Blocked", "Unknown"},
		{libvirt.DomainPaused, int32(libvirt.DomainPausedUser), "Paused", "User"},
		{libvirt.DomainPaused, int32(libvirt.DomainPausedIoerror), "Paused", "IOError"},
		{libvirt.DomainPaused, int32(libvirt.DomainPausedStartingUp), "Paused", "StartingUp"},
		{libvirt.DomainPaused, int32(libvirt.DomainPausedPostcopyFailed), "Paused", "PostcopyFailed"},
		{libvirt.DomainPaused, int32(libvirt.DomainPausedAPIError), "Paused", ""},
		{libvirt.DomainShutdown, int32(libvirt.DomainShutdownUser), "ShuttingDown", "User"},
		{libvirt.DomainShutoff, int32(libvirt.DomainShutoffShutdown), "Shutoff", "Shutdown"},
		{libvirt.DomainShutoff, int32(libvirt.DomainShutoffDestroyed), "Shutoff", "Destroyed"},
		{libvirt.DomainShutoff, int32(libvirt.DomainShutoffCrashed), "Shutoff", "Crashed"},
		{libvirt.DomainShutoff, int32(libvirt.DomainShutoffFromSnapshot), "Shutoff", "FromSnapshot"},
		{libvirt.DomainShutoff, int32(libvirt.DomainShutoffDaemon), "Shutoff", ""},
		{libvirt.DomainCrashed, int32(libvirt.DomainCrashedPanicked), "Crashed", "Panicked"},
		{libvirt.DomainPmsuspended, 0, "PMSuspended", "Unknown"},
		{libvirt.DomainRunning, -1, "Running", ""},
		{libvirt.DomainState(42), 0, "NoState", ""},
	}
	for _, c := range cases {
		s, r := StateAndReason(c.state, c.reason)
		if s != c.status || r != c.reason2 {
			t.Errorf("StateAndReason(%d, %d) = %q, %q; want %q, %q", c.state, c.reason, s, r, c.status, c.reason2)
		}
	}
}

func TestNewAlias(t *testing.T) {
	cases := map[string]Alias{
		"ua-rootdisk": {Name: "rootdisk", UserDefined: true},
		"net0":        {Name: "net0"},
		"ua-":         {Name: "", UserDefined: true},
	}
	for in, want := range cases {
		if got := *NewAlias(in); got != want {
			t.Errorf("NewAlias(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// TestDecodesKubeVirtOutput: our types read the object KubeVirt's launcher
// emits (the running-domain illustration of kubevirt-wire.md 3.3), decoded
// case-sensitively as the notifytest server and cmdclient.GetDomain do.
func TestDecodesKubeVirtOutput(t *testing.T) {
	const example = `{"kind":"Domain","apiVersion":"1.2.2","ObjectMeta":{"name":"vm1","namespace":"ns1","uid":"U"},"Spec":{"Type":"kvm","Name":"ns1_vm1","CurrentMemory":{"Value":1048576,"Unit":"KiB"},"OS":{"Type":{"OS":"hvm","Arch":"x86_64","Machine":"pc-q35-rhel9.6.0"}},"Devices":{"Interfaces":[{"MAC":{"MAC":"02:00:00:00:00:01"},"Alias":{"Name":"default","UserDefined":true}}],"Disks":[{"Source":{"File":"/d/disk.qcow2"},"Target":{"Bus":"virtio","Device":"vda"},"Alias":{"Name":"rootdisk","UserDefined":true}}],"Channels":[{"Type":"unix","Target":{"Name":"org.qemu.guest_agent.0","Type":"virtio","State":"connected"}}]},"Features":{"ACPI":{}},"Metadata":{"KubeVirt":{"UID":"U","GracePeriod":{"DeletionGracePeriodSeconds":30,"DeletionTimestamp":null,"MarkedForGracefulShutdown":null}}}},"Status":{"Status":"Running","Reason":"Unknown","OSInfo":{"Name":""},"FSFreezeStatus":{"Status":""},"PanicCount":0}}`
	var d Domain
	if err := kjson.UnmarshalCaseSensitivePreserveInts([]byte(example), &d); err != nil {
		t.Fatal(err)
	}
	if d.Name != "vm1" || d.Spec.Devices.Interfaces[0].Alias.Name != "default" || !d.Spec.Devices.Interfaces[0].Alias.UserDefined ||
		d.Spec.Devices.Disks[0].Source.File != "/d/disk.qcow2" || d.Spec.Features.ACPI == nil ||
		d.Spec.Metadata.KubeVirt.GracePeriod.DeletionGracePeriodSeconds != 30 || d.Status.Status != "Running" {
		t.Errorf("decoded %+v", d)
	}
}

// TestBackupAndDataStore: the backup record is Spec.Metadata.KubeVirt.Backup
// with KubeVirt's keys, and a disk on a changed block tracking overlay
// shows its image as Source.DataStore in api.DataStore's shape (what
// virt-handler reads to move CBT to Enabled); other disks have none.
func TestBackupAndDataStore(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	const overlay = "/var/run/kubevirt-ephemeral-disks/disk-data/rootdisk/disk.qcow2"
	md := Metadata{UID: "U", DataFiles: map[string]string{overlay: "/pvc/disk.img", "/elsewhere.qcow2": "/x"},
		Backup: &BackupMetadata{Name: "b", Mode: "Push", StartTimestamp: &start, CheckpointName: "b-2026-12-07_10-00-00",
			Volumes: `[{"volumeName":"rootdisk","diskTarget":"vda"}]`, QuiesceStatus: "Succeeded"}}
	data, err := json.Marshal(Build("vm1", "ns1", parse(t), libvirt.DomainRunning, int32(libvirt.DomainRunningBooted), md))
	if err != nil {
		t.Fatal(err)
	}
	kv := decodeKubeVirt(t, data)
	b := kv.Spec.Metadata.KubeVirt.Backup
	if b == nil || b.Name != "b" || b.Mode != "Push" || b.CheckpointName != "b-2026-12-07_10-00-00" || b.QuiesceStatus != "Succeeded" ||
		b.StartTimestamp == nil || !b.StartTimestamp.Equal(start.Time) || b.EndTimestamp != nil || b.Volumes != md.Backup.Volumes {
		t.Errorf("Backup = %+v", b)
	}
	var withStore int
	for _, d := range kv.Spec.Devices.Disks {
		if len(d.Source.DataStore) == 0 || string(d.Source.DataStore) == "null" {
			continue
		}
		withStore++
		var ds struct {
			Type   string
			Format *struct{ Type string }
			Source *struct {
				Dev, File, StartupPolicy, Protocol, Name string
				Host, Reservations, Slices, DataStore    json.RawMessage
			}
		}
		dec := json.NewDecoder(strings.NewReader(string(d.Source.DataStore)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ds); err != nil {
			t.Fatalf("DataStore %s: %v", d.Source.DataStore, err)
		}
		if d.Source.File != overlay || ds.Type != "file" || ds.Format == nil || ds.Format.Type != "raw" || ds.Source == nil || ds.Source.File != "/pvc/disk.img" {
			t.Errorf("disk %s: DataStore %s", d.Source.File, d.Source.DataStore)
		}
	}
	if withStore != 1 {
		t.Errorf("%d disks with a DataStore, want 1 (the overlay's)", withStore)
	}
}
