package migration

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

func uintp(u uint) *uint { return &u }

func strp(s string) *string { return &s }

// TestParseOptions: the JSON virt-handler sends (KubeVirt's
// cmdclient.MigrationOptions, v1.8.2 defaults, and v1.9 with its added
// fields), and what is refused.
func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     Options
		err      string
	}{
		{"defaults", `{"Bandwidth":"0","ProgressTimeout":150,"CompletionTimeoutPerGiB":150,"UnsafeMigration":false,"AllowAutoConverge":false,"AllowPostCopy":false,"ParallelMigrationThreads":8,"AllowWorkloadDisruption":false}`,
			Options{Bandwidth: resource.MustParse("0"), ProgressTimeout: 150, CompletionTimeoutPerGiB: 150, ParallelMigrationThreads: uintp(8)}, ""},
		{"v1.9 fields", `{"Bandwidth":"64Mi","ProgressTimeout":10,"AllowPostCopy":true,"AllowWorkloadDisruption":true,"MaxDowntimeMs":300,"Compression":null}`,
			Options{Bandwidth: resource.MustParse("64Mi"), ProgressTimeout: 10, AllowPostCopy: true, AllowWorkloadDisruption: true, MaxDowntimeMs: 300}, ""},
		{"v1.9 stall detector, compression", `{"Bandwidth":"0","MaxDowntimeMs":900,"StallDetectorOptions":{"StallMargin":0.04,"StallProgressTimeout":40,"SwitchoverTimeout":60,"EwmaAlpha":0.4,"PrecopyPossibleFactor":1.5,"PatienceWindowDecayFactor":0.5,"SearchLocalMinima":true,"CompletionTimeoutFactor":2},"Compression":"zstd"}`,
			Options{Bandwidth: resource.MustParse("0"), MaxDowntimeMs: 900, StallDetectorOptions: &StallDetectorOptions{StallMargin: 0.04, StallProgressTimeout: 40,
				SwitchoverTimeout: 60, EwmaAlpha: 0.4, PrecopyPossibleFactor: 1.5, PatienceWindowDecayFactor: 0.5, SearchLocalMinima: true, CompletionTimeoutFactor: 2}, Compression: strp("zstd")}, ""},
		{"EwmaAlpha 0", `{"StallDetectorOptions":{"EwmaAlpha":0,"PrecopyPossibleFactor":1.5,"CompletionTimeoutFactor":2}}`, Options{}, "StallDetectorOptions.EwmaAlpha 0 must be greater than 0"},
		{"PrecopyPossibleFactor below 1", `{"StallDetectorOptions":{"EwmaAlpha":0.4,"PrecopyPossibleFactor":0.5,"CompletionTimeoutFactor":2}}`, Options{}, "StallDetectorOptions.PrecopyPossibleFactor 0.5 must be at least 1"},
		{"StallMargin above 1", `{"StallDetectorOptions":{"StallMargin":4,"EwmaAlpha":0.4,"PrecopyPossibleFactor":1.5,"CompletionTimeoutFactor":2}}`, Options{}, "StallDetectorOptions.StallMargin 4 must be at most 1"},
		{"absent", ``, Options{}, "migration options object not present"},
		{"not JSON", `{`, Options{}, "migration options"},
		{"negative bandwidth", `{"Bandwidth":"-1Mi"}`, Options{}, "negative"},
	} {
		got, err := ParseOptions([]byte(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.Bandwidth.Cmp(c.want.Bandwidth) != 0 || got.ProgressTimeout != c.want.ProgressTimeout ||
			got.CompletionTimeoutPerGiB != c.want.CompletionTimeoutPerGiB || got.AllowPostCopy != c.want.AllowPostCopy ||
			got.AllowWorkloadDisruption != c.want.AllowWorkloadDisruption ||
			(got.ParallelMigrationThreads == nil) != (c.want.ParallelMigrationThreads == nil) ||
			(got.ParallelMigrationThreads != nil && *got.ParallelMigrationThreads != *c.want.ParallelMigrationThreads) ||
			got.MaxDowntimeMs != c.want.MaxDowntimeMs || !reflect.DeepEqual(got.StallDetectorOptions, c.want.StallDetectorOptions) ||
			!reflect.DeepEqual(got.Compression, c.want.Compression) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestBandwidthMiB(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "0Mi": 0, "1": 1, "512Ki": 1, "1Mi": 1, "64Mi": 64, "1Gi": 1024, "1500Ki": 1} {
		if got := (Options{Bandwidth: resource.MustParse(in)}).BandwidthMiB(); got != want {
			t.Errorf("BandwidthMiB(%s) = %d, want %d", in, got, want)
		}
	}
}

func TestFlags(t *testing.T) {
	base := libvirt.MigrateLive | libvirt.MigratePeer2peer | libvirt.MigratePersistDest
	for _, c := range []struct {
		name          string
		o             Options
		block, paused bool
		want          libvirt.DomainMigrateFlags
	}{
		{"plain", Options{}, false, false, base},
		{"block", Options{}, true, false, base | libvirt.MigrateNonSharedInc},
		{"paused", Options{}, false, true, base | libvirt.MigratePaused},
		{"unsafe, auto-converge", Options{UnsafeMigration: true, AllowAutoConverge: true}, false, false, base | libvirt.MigrateUnsafe | libvirt.MigrateAutoConverge},
		{"parallel", Options{ParallelMigrationThreads: uintp(8)}, false, false, base | libvirt.MigrateParallel},
		{"post-copy wins over parallel", Options{AllowPostCopy: true, ParallelMigrationThreads: uintp(8)}, false, false, base | libvirt.MigratePostcopy},
		{"zstd", Options{ParallelMigrationThreads: uintp(8), Compression: strp("zstd")}, false, false, base | libvirt.MigrateParallel | libvirt.MigrateCompressed},
		{"compression none", Options{Compression: strp("none")}, false, false, base},
	} {
		if got := Flags(c.o, c.block, c.paused); got != c.want {
			t.Errorf("%s: flags %#x, want %#x", c.name, got, c.want)
		}
	}
}

func TestDestinationURI(t *testing.T) {
	l := layout.Default()
	const uid = "u-1"
	if got, want := DestinationURI(l, uid, false), "qemu+unix:///session?socket=/var/run/kubevirt/migrationproxy/u-1-source.sock"; got != want {
		t.Errorf("non-root: %s, want %s", got, want)
	}
	if got, want := DestinationURI(l, uid, true), "qemu+unix:///system?socket=/var/run/kubevirt/migrationproxy/u-1-source.sock"; got != want {
		t.Errorf("root: %s, want %s", got, want)
	}
}

// params renders typed parameters as field=value, numbers with their
// type (the wire type matters to libvirt), in order.
func params(ps []libvirt.TypedParam) []string {
	var out []string
	for _, p := range ps {
		switch v := p.Value.I.(type) {
		case string:
			out = append(out, p.Field+"="+v)
		default:
			kind := map[uint32]string{1: "int", 2: "uint", 3: "llong", 4: "ullong"}[p.Value.D]
			out = append(out, fmt.Sprintf("%s=%s:%v", p.Field, kind, v))
		}
	}
	return out
}

func TestParams(t *testing.T) {
	l := layout.Default()
	sock := "/var/run/kubevirt/migrationproxy/u-1"
	for _, c := range []struct {
		name string
		r    Request
		want []string
	}{
		{"memory only", Request{Layout: l, UID: "u-1", XML: "<domain/>", Name: "ns_vm", Options: Options{}, LibvirtVersion: 9_000_000},
			[]string{"migrate_uri=unix://" + sock + "-49152-source.sock", "destination_xml=<domain/>", "persistent_xml=<domain/>", "destination_name=ns_vm"}},
		{"bandwidth, parallel", Request{Layout: l, UID: "u-1", XML: "x", Name: "n", Options: Options{Bandwidth: resource.MustParse("64Mi"), ParallelMigrationThreads: uintp(4)}, LibvirtVersion: 9_000_000},
			[]string{"migrate_uri=unix://" + sock + "-49152-source.sock", "destination_xml=x", "persistent_xml=x", "destination_name=n", "bandwidth=ullong:64", "parallel.connections=int:4"}},
		{"zstd", Request{Layout: l, UID: "u-1", XML: "x", Name: "n", Options: Options{ParallelMigrationThreads: uintp(8), Compression: strp("zstd")}, LibvirtVersion: 9_004_000},
			[]string{"migrate_uri=unix://" + sock + "-49152-source.sock", "destination_xml=x", "persistent_xml=x", "destination_name=n", "parallel.connections=int:8", "compression=zstd"}},
		{"disks on 9.0: no detect_zeroes", Request{Layout: l, UID: "u-1", XML: "x", Name: "n", Disks: []string{"vda", "vdb"}, LibvirtVersion: 9_000_000},
			[]string{"migrate_uri=unix://" + sock + "-49152-source.sock", "destination_xml=x", "persistent_xml=x", "destination_name=n",
				"migrate_disks=vda", "migrate_disks=vdb", "disks_uri=unix://" + sock + "-49153-source.sock"}},
		{"disks on 10.9", Request{Layout: l, UID: "u-1", XML: "x", Name: "n", Disks: []string{"vda"}, LibvirtVersion: 10_009_000},
			[]string{"migrate_uri=unix://" + sock + "-49152-source.sock", "destination_xml=x", "persistent_xml=x", "destination_name=n",
				"migrate_disks=vda", "disks_uri=unix://" + sock + "-49153-source.sock", "migrate_disks_detect_zeroes=vda"}},
	} {
		if got := params(Params(c.r)); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func disk(dev, target, alias, typ string, ro bool) libvirtxml.DomainDisk {
	d := libvirtxml.DomainDisk{Device: dev, Target: &libvirtxml.DomainDiskTarget{Dev: target}, Alias: &libvirtxml.DomainAlias{Name: "ua-" + alias}}
	switch typ {
	case "file":
		d.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/x/" + alias}}
	case "block":
		d.Source = &libvirtxml.DomainDiskSource{Block: &libvirtxml.DomainDiskSourceBlock{Dev: "/dev/" + alias}}
	case "network":
		d.Source = &libvirtxml.DomainDiskSource{Network: &libvirtxml.DomainDiskSourceNetwork{Protocol: "nbd"}}
	}
	if ro {
		d.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	return d
}

// TestCopyDisks: which disks a block migration copies.
func TestCopyDisks(t *testing.T) {
	yes := true
	vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{
		{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "i"}}},
		{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "x"}}},
		{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}},
		{Name: "moved", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv"}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/h", Shared: &yes}}},
		{Name: "local", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/l"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}},
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		{Name: "roscratch", VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{}}},
	}}, Status: v1.VirtualMachineInstanceStatus{MigratedVolumes: []v1.StorageMigratedVolumeInfo{{VolumeName: "moved"}}}}
	disks := []libvirtxml.DomainDisk{
		disk("disk", "vda", "root", "file", false),
		disk("disk", "vdb", "ci", "file", true), // generated, read-only: copied
		disk("disk", "vdc", "pvc", "file", false),
		disk("disk", "vdd", "moved", "block", false),
		disk("disk", "vde", "host", "file", false),
		disk("disk", "vdf", "local", "file", false),
		disk("disk", "vdg", "scratch", "file", false),
		disk("cdrom", "sda", "cfg", "file", true),
		disk("disk", "vdh", "roscratch", "file", true),
		disk("disk", "vdi", "net", "network", false),
	}
	want := []string{"vda", "vdb", "vdd", "vdf", "vdg"}
	if got := CopyDisks(vmi, disks); !slices.Equal(got, want) {
		t.Errorf("CopyDisks = %v, want %v", got, want)
	}
}

func TestDataSizeAndAcceptable(t *testing.T) {
	vmi := func(req, guest string, block bool) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		if req != "" {
			v.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse(req)}
		}
		if guest != "" {
			q := resource.MustParse(guest)
			v.Spec.Domain.Memory = &v1.Memory{Guest: &q}
		}
		if block {
			v.Status.MigrationMethod = v1.BlockMigration
		}
		return v
	}
	for _, c := range []struct {
		name      string
		v         *v1.VirtualMachineInstance
		ephemeral int64
		want      int64
	}{
		{"request", vmi("2Gi", "", false), 0, 3},      // 2.15 GB, rounded up
		{"guest wins", vmi("2Gi", "1G", false), 0, 1}, // memory.guest
		{"small", vmi("256Mi", "", false), 0, 1},
		{"block adds the ephemeral disks", vmi("1G", "", true), 3_500_000_000, 5},
		{"ephemeral ignored without block", vmi("1G", "", false), 3_500_000_000, 1},
	} {
		if got := DataSize(c.v, c.ephemeral); got != c.want {
			t.Errorf("%s: DataSize %d GB, want %d", c.name, got, c.want)
		}
	}
	if got := Acceptable(Options{CompletionTimeoutPerGiB: 150}, 3); got != 450*time.Second {
		t.Errorf("Acceptable = %v, want 450s", got)
	}
	if got := Acceptable(Options{}, 3); got != 0 {
		t.Errorf("Acceptable without a per-GiB timeout = %v, want 0 (no limit)", got)
	}
}

func TestMigrationUID(t *testing.T) {
	if _, err := MigrationUID(&v1.VirtualMachineInstance{}); err == nil || !strings.Contains(err.Error(), "migrationState is ready") {
		t.Errorf("no migration state: %v", err)
	}
	v := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: types.UID("m1")}}}
	if u, err := MigrationUID(v); err != nil || u != "m1" {
		t.Errorf("MigrationUID = %q, %v; want m1", u, err)
	}
	v.Status.MigrationState.SourceState = &v1.VirtualMachineInstanceMigrationSourceState{VirtualMachineInstanceCommonMigrationState: v1.VirtualMachineInstanceCommonMigrationState{MigrationUID: "m2"}}
	if u, _ := MigrationUID(v); u != "m2" {
		t.Errorf("decentralized: %q, want the source state's m2", u)
	}
}

// TestMetadataTransitions: start, a repeated start, results, an abort.
func TestMetadataTransitions(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	m, running, err := Start(nil, "m1", t0)
	if err != nil || running || m.UID != "m1" || !m.StartTimestamp.Time.Equal(t0) || m.Mode != "PreCopy" || m.EndTimestamp != nil {
		t.Fatalf("Start: %+v, %v, %v", m, running, err)
	}
	if again, running, err := Start(m, "m1", t0.Add(time.Second)); err != nil || !running || again != m {
		t.Errorf("the same migration again while it runs: %+v, %v, %v; want it running, unchanged", again, running, err)
	}
	done, err := Result(m, false, "", "", t0.Add(5*time.Second))
	if err != nil || done.Failed || done.EndTimestamp == nil || !done.EndTimestamp.Time.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("success: %+v, %v", done, err)
	}
	if m.EndTimestamp != nil {
		t.Errorf("Result changed the metadata it was given")
	}
	if _, _, err := Start(done, "m1", t0); err == nil || !strings.Contains(err.Error(), "already executed") {
		t.Errorf("an ended migration started again: %v", err)
	}
	if n, _, err := Start(done, "m2", t0.Add(time.Minute)); err != nil || n.UID != "m2" || n.EndTimestamp != nil {
		t.Errorf("a new migration after an ended one: %+v, %v", n, err)
	}
	if kept, err := Result(done, true, "late", "", t0.Add(time.Minute)); err != nil || kept.Failed || !kept.EndTimestamp.Time.Equal(t0.Add(5*time.Second)) {
		t.Errorf("a result after the end overwrote it: %+v, %v", kept, err)
	}
	failed, _ := Result(m, true, "Live migration failed boom", "", t0.Add(time.Second))
	if !failed.Failed || failed.FailureReason != "Live migration failed boom" || failed.EndTimestamp == nil {
		t.Errorf("failure: %+v", failed)
	}
	// An abort: in progress (no end), again (refused), then its outcome.
	aborting, err := Result(m, false, "", v1.MigrationAbortInProgress, t0)
	if err != nil || aborting.AbortStatus != "Aborting" || aborting.EndTimestamp != nil {
		t.Fatalf("abort in progress: %+v, %v", aborting, err)
	}
	if _, err := Result(aborting, false, "", v1.MigrationAbortInProgress, t0); err != ErrAbortInProgress {
		t.Errorf("a second abort: %v, want ErrAbortInProgress", err)
	}
	if _, err := Result(aborting, false, "", "", t0); err != ErrAbortInProgress {
		t.Errorf("a plain result during an abort: %v, want ErrAbortInProgress", err)
	}
	aborted, err := Result(aborting, true, "Live migration aborted ", v1.MigrationAbortSucceeded, t0.Add(2*time.Second))
	if err != nil || aborted.AbortStatus != "Succeeded" || !aborted.Failed || aborted.EndTimestamp == nil {
		t.Errorf("abort succeeded: %+v, %v", aborted, err)
	}
	abortFailed, _ := Result(aborting, false, "", v1.MigrationAbortFailed, t0)
	if abortFailed.AbortStatus != "Failed" || abortFailed.EndTimestamp != nil {
		t.Errorf("abort failed: %+v; want no end (the migration goes on)", abortFailed)
	}
	if r, err := Result(nil, true, "x", "", t0); r != nil || err != nil {
		t.Errorf("a result without a migration: %+v, %v", r, err)
	}
}
