package domain

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	backupv1 "kubevirt.io/api/backup/v1alpha1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

const testHotplug = "/var/run/kubevirt/hotplug-disks"

func startOptions(name string, at time.Time) *backupv1.BackupOptions {
	st := metav1.NewTime(at)
	target := testHotplug + "/backupvol"
	return &backupv1.BackupOptions{BackupName: name, Cmd: backupv1.Start, Mode: backupv1.PushMode, BackupStartTime: &st, TargetPath: &target}
}

// TestCheckBackupOptions: what virt-handler would never send is refused
// naming the field.
func TestCheckBackupOptions(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name   string
		change func(o *backupv1.BackupOptions)
		want   string // "" for accepted; else the error's start
	}{
		{name: "push", change: func(*backupv1.BackupOptions) {}},
		{name: "pull", change: func(o *backupv1.BackupOptions) { o.Mode = backupv1.PullMode }},
		{name: "incremental", change: func(o *backupv1.BackupOptions) { o.Incremental = str("b0-2026-12-06_10-00-00") }},
		{name: "abort needs only the name", change: func(o *backupv1.BackupOptions) { *o = backupv1.BackupOptions{Cmd: backupv1.Abort, BackupName: "b"} }},
		{name: "abort without a name", change: func(o *backupv1.BackupOptions) { *o = backupv1.BackupOptions{Cmd: backupv1.Abort} }, want: "backupName:"},
		{name: "export", change: func(o *backupv1.BackupOptions) { o.Cmd = backupv1.Export }, want: "cmd Export:"},
		{name: "unknown cmd", change: func(o *backupv1.BackupOptions) { o.Cmd = "Restore" }, want: `cmd "Restore"`},
		{name: "no cmd", change: func(o *backupv1.BackupOptions) { o.Cmd = "" }, want: `cmd ""`},
		{name: "unknown mode", change: func(o *backupv1.BackupOptions) { o.Mode = "Sideways" }, want: `mode "Sideways"`},
		{name: "no name", change: func(o *backupv1.BackupOptions) { o.BackupName = "" }, want: "backupName:"},
		{name: "name leaving its directory", change: func(o *backupv1.BackupOptions) { o.BackupName = "../x" }, want: "backupName:"},
		{name: "no start time", change: func(o *backupv1.BackupOptions) { o.BackupStartTime = nil }, want: "backupStartTime:"},
		{name: "no target", change: func(o *backupv1.BackupOptions) { o.TargetPath = nil }, want: "targetPath:"},
		{name: "target outside the hotplug volumes", change: func(o *backupv1.BackupOptions) { o.TargetPath = str("/etc") }, want: `targetPath "/etc"`},
		{name: "target deeper than a volume", change: func(o *backupv1.BackupOptions) { o.TargetPath = str(testHotplug + "/v/sub") }, want: "targetPath"},
		{name: "target the hotplug directory itself", change: func(o *backupv1.BackupOptions) { o.TargetPath = str(testHotplug) }, want: "targetPath"},
		{name: "relative target", change: func(o *backupv1.BackupOptions) { o.TargetPath = str("backupvol") }, want: "targetPath"},
		{name: "target with ..", change: func(o *backupv1.BackupOptions) { o.TargetPath = str(testHotplug + "/../x") }, want: "targetPath"},
		{name: "incremental with a slash", change: func(o *backupv1.BackupOptions) { o.Incremental = str("a/b") }, want: "incremental:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := startOptions("b", t0)
			tc.change(o)
			err := checkBackupOptions(o, testHotplug)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("err = %v, want it to start with %q", err, tc.want)
			}
		})
	}
}

// TestStartBackup is the decision on a Start against the last record.
func TestStartBackup(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	ts := func(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }
	running := &domainjson.BackupMetadata{Name: "b", StartTimestamp: ts(t0)}
	ended := &domainjson.BackupMetadata{Name: "b", StartTimestamp: ts(t0), EndTimestamp: ts(t0.Add(time.Minute)), Completed: true}
	for _, tc := range []struct {
		name      string
		last      *domainjson.BackupMetadata
		o         *backupv1.BackupOptions
		wantStart bool
		wantErr   string
	}{
		{name: "first backup", o: startOptions("b", t0), wantStart: true},
		{name: "after a reset record", last: &domainjson.BackupMetadata{}, o: startOptions("b", t0), wantStart: true},
		{name: "the same one running: nothing to do", last: running, o: startOptions("b", t0)},
		{name: "the same one ended", last: ended, o: startOptions("b", t0), wantErr: "backup b that started at"},
		{name: "another while one runs", last: running, o: startOptions("c", t0), wantErr: "backup b already in progress"},
		{name: "the same name, a later start, while it runs", last: running, o: startOptions("b", t0.Add(time.Hour)), wantErr: "already in progress"},
		{name: "another after one ended", last: ended, o: startOptions("c", t0.Add(time.Hour)), wantStart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, start, err := startBackup(tc.last, tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || start != tc.wantStart {
				t.Fatalf("start %v, %v; want %v", start, err, tc.wantStart)
			}
			if start && (rec.Name != tc.o.BackupName || !rec.StartTimestamp.Equal(tc.o.BackupStartTime) || rec.Mode != "Push" || rec.EndTimestamp != nil) {
				t.Errorf("new record %+v", rec)
			}
			if !start && rec != tc.last {
				t.Errorf("record changed: %+v", rec)
			}
		})
	}
}

// TestEndBackup is the record of an ended job, as KubeVirt writes it.
func TestEndBackup(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 5, 0, 0, time.UTC)
	start := metav1.NewTime(now.Add(-time.Minute))
	rec := func(mode backupv1.BackupMode) *domainjson.BackupMetadata {
		return &domainjson.BackupMetadata{Name: "b", Mode: string(mode), StartTimestamp: &start}
	}
	for _, tc := range []struct {
		name       string
		mode       backupv1.BackupMode
		end        jobEnd
		wantFailed bool
		wantMsg    string
	}{
		{name: "completed", mode: backupv1.PushMode, end: jobEnd{typ: libvirt.DomainJobCompleted}},
		{name: "push aborted", mode: backupv1.PushMode, end: jobEnd{typ: libvirt.DomainJobCancelled, errmsg: "Operation canceled"},
			wantFailed: true, wantMsg: "backup aborted: Operation canceled"},
		{name: "pull ended by its abort", mode: backupv1.PullMode, end: jobEnd{typ: libvirt.DomainJobCancelled, errmsg: "Operation canceled"}},
		{name: "failed with a message", mode: backupv1.PushMode, end: jobEnd{typ: libvirt.DomainJobFailed, errmsg: "No space left on device"},
			wantFailed: true, wantMsg: "No space left on device"},
		{name: "failed, no message", mode: backupv1.PushMode, end: jobEnd{typ: libvirt.DomainJobFailed}, wantFailed: true, wantMsg: "unknown failure reason"},
		{name: "pull failing for another reason", mode: backupv1.PullMode, end: jobEnd{typ: libvirt.DomainJobFailed, errmsg: "I/O error"},
			wantFailed: true, wantMsg: "I/O error"},
		{name: "an unexpected type", mode: backupv1.PushMode, end: jobEnd{typ: libvirt.DomainJobNone}, wantFailed: true,
			wantMsg: "unexpected job completion type: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := rec(tc.mode)
			got := endBackup(cur, tc.end, now)
			if !got.Completed || got.EndTimestamp == nil || !got.EndTimestamp.Time.Equal(now) || got.Failed != tc.wantFailed || got.BackupMsg != tc.wantMsg {
				t.Errorf("got %+v, want failed %v message %q", got, tc.wantFailed, tc.wantMsg)
			}
			if cur.EndTimestamp != nil {
				t.Errorf("the current record was changed in place")
			}
			if again := endBackup(got, jobEnd{typ: libvirt.DomainJobFailed}, now.Add(time.Hour)); again != got {
				t.Errorf("an ended record ended again: %+v", again)
			}
		})
	}
}

// TestCheckAbort: an Abort must name the backup running.
func TestCheckAbort(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	st := metav1.NewTime(t0)
	running := &domainjson.BackupMetadata{Name: "b", StartTimestamp: &st}
	done := &domainjson.BackupMetadata{Name: "b", StartTimestamp: &st, Completed: true}
	abort := func(name string, at time.Time) *backupv1.BackupOptions {
		o := startOptions(name, at)
		o.Cmd = backupv1.Abort
		return o
	}
	for _, tc := range []struct {
		name string
		last *domainjson.BackupMetadata
		o    *backupv1.BackupOptions
		want string
	}{
		{name: "the running one", last: running, o: abort("b", t0)},
		{name: "none", o: abort("b", t0), want: "could not find ongoing backup"},
		{name: "another", last: running, o: abort("c", t0), want: "differs from ongoing"},
		{name: "another start", last: running, o: abort("b", t0.Add(time.Second)), want: "differs from ongoing"},
		{name: "ended", last: done, o: abort("b", t0), want: "already completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkAbort(tc.last, tc.o)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestBackupXML: tracked disks are backed up (push: a qcow2 target each;
// pull: an export named after the volume with the checkpoint's bitmap),
// the others not; the checkpoint covers the tracked ones.
func TestBackupXML(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	live := &libvirtxml.Domain{Devices: &libvirtxml.DomainDeviceList{Disks: []libvirtxml.DomainDisk{
		{Target: &libvirtxml.DomainDiskTarget{Dev: "vda"}, Alias: &libvirtxml.DomainAlias{Name: "ua-root"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/e/root.qcow2"}}},
		{Target: &libvirtxml.DomainDiskTarget{Dev: "vdb"}, Alias: &libvirtxml.DomainAlias{Name: "ua-data"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/cbt/data.qcow2"}}},
		{Alias: &libvirtxml.DomainAlias{Name: "ua-notarget"}},
	}}}
	disks := backupDisks(live, map[string]string{"/cbt/data.qcow2": "/pvc/data/disk.img"})
	o := startOptions("b", t0)
	inc := "a-2026-12-06_10-00-00"
	o.Incremental = &inc
	b, c, vols := backupXML(disks, o, "/t/vm/b-2026-12-07_10-00-00", "/s/backup-nbd-sock")
	bx, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cx, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<domainbackup mode="push">`, `<incremental>a-2026-12-06_10-00-00</incremental>`,
		`<disk name="vda" backup="no">`, `<disk type="file" name="vdb" backup="yes">`, `<driver type="qcow2">`,
		`<target file="/t/vm/b-2026-12-07_10-00-00/b-data.qcow2">`} {
		if !strings.Contains(bx, want) {
			t.Errorf("backup XML lacks %s:\n%s", want, bx)
		}
	}
	for _, want := range []string{`<name>b-2026-12-07_10-00-00</name>`, `<disk name="vda" checkpoint="no">`, `<disk name="vdb" checkpoint="bitmap">`} {
		if !strings.Contains(cx, want) {
			t.Errorf("checkpoint XML lacks %s:\n%s", want, cx)
		}
	}
	if len(vols) != 1 || vols[0].VolumeName != "data" || vols[0].DiskTarget != "vdb" {
		t.Errorf("volumes %+v", vols)
	}

	o.Mode, o.Incremental = backupv1.PullMode, nil
	b, _, _ = backupXML(disks, o, "/t/vm/b-2026-12-07_10-00-00", "/s/backup-nbd-sock")
	bx, err = b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<domainbackup mode="pull">`, `<server transport="unix" socket="/s/backup-nbd-sock">`,
		`exportname="data"`, `exportbitmap="b-2026-12-07_10-00-00"`, `<scratch file="/t/vm/b-2026-12-07_10-00-00/b-data.qcow2">`} {
		if !strings.Contains(bx, want) {
			t.Errorf("pull backup XML lacks %s:\n%s", want, bx)
		}
	}
	if strings.Contains(bx, "<incremental>") {
		t.Errorf("a full pull backup names an incremental base:\n%s", bx)
	}
}

// TestCheckpointDisks: a checkpoint is redefined over the tracked disks
// whose overlay QEMU opened with a consistent bitmap of its name.
func TestCheckpointDisks(t *testing.T) {
	disks := []diskFile{
		{target: "vdb", file: "/cbt/b.qcow2", tracked: true},
		{target: "vdc", file: "/cbt/c.qcow2", tracked: true},
		{target: "vdd", file: "/cbt/d.qcow2", tracked: true},
		{target: "vda", file: "/e/root.qcow2"},
	}
	bm := func(name string, inconsistent bool) struct {
		Name         string `json:"name"`
		Inconsistent bool   `json:"inconsistent"`
	} {
		return struct {
			Name         string `json:"name"`
			Inconsistent bool   `json:"inconsistent"`
		}{name, inconsistent}
	}
	nodes := []blockNode{
		{File: "/cbt/b.qcow2"},
		{File: "/cbt/b.qcow2"},
		{File: "/cbt/c.qcow2"},
		{File: "/cbt/d.qcow2"},
		{File: "/e/root.qcow2"},
	}
	nodes[1].DirtyBitmaps = append(nodes[1].DirtyBitmaps, bm("cp1", false), bm("cp0", false))
	nodes[2].DirtyBitmaps = append(nodes[2].DirtyBitmaps, bm("cp1", true))
	nodes[3].DirtyBitmaps = append(nodes[3].DirtyBitmaps, bm("cp0", false))
	nodes[4].DirtyBitmaps = append(nodes[4].DirtyBitmaps, bm("cp1", false))
	for _, tc := range []struct {
		name string
		want string
	}{
		{"cp1", "vdb"},     // vdc's is inconsistent, vda is not tracked
		{"cp0", "vdb,vdd"}, // sorted
		{"cp9", ""},
	} {
		if got := strings.Join(checkpointDisks(disks, nodes, tc.name), ","); got != tc.want {
			t.Errorf("checkpoint %s: disks %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCheckpointInvalid: libvirt's codes for a checkpoint that does not
// fit its disks tell virt-handler a full backup is due; others do not.
func TestCheckpointInvalid(t *testing.T) {
	for code, want := range map[libvirt.ErrorNumber]bool{
		libvirt.ErrInvalidDomainCheckpoint: true, libvirt.ErrNoDomainCheckpoint: true, libvirt.ErrCheckpointInconsistent: true,
		libvirt.ErrOperationFailed: false, libvirt.ErrInternalError: false,
	} {
		if got := checkpointInvalid(libvirt.Error{Code: uint32(code)}); got != want {
			t.Errorf("code %v: invalid %v, want %v", code, got, want)
		}
	}
	if checkpointInvalid(errors.New("not libvirt's")) {
		t.Errorf("a non-libvirt error counted as an invalid checkpoint")
	}
}
