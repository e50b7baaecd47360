package disks

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// hookFunc adapts a function to CloudInitHook. The gRPC side of the hook
// is tested in internal/hooks with real sidecar servers; here only the
// disk preparation's use of what a hook returns is under test.
type hookFunc func(*CloudInitData) (*CloudInitData, error)

func (f hookFunc) PreCloudInitIso(_ context.Context, _ *v1.VirtualMachineInstance, d *CloudInitData) (*CloudInitData, error) {
	return f(d)
}

func TestCloudInitHookChangesISO(t *testing.T) {
	p, _ := newPreparer(t)
	var seen CloudInitData
	p.Hooks = hookFunc(func(d *CloudInitData) (*CloudInitData, error) {
		seen = *d
		c := *d
		c.UserData += "echo hooked\n"
		return &c, nil
	})
	vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#!/bin/sh\n"}}})
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	if seen.DataSource != DataSourceNoCloud || seen.VolumeName != "ci" || seen.NoCloudMetaData == nil || seen.NoCloudMetaData.LocalHostname != "testvm" {
		t.Errorf("hook saw %+v", seen)
	}
	files := readISO(t, p.Layout.CloudInitNoCloudISO("ns1", "testvm"))
	if files["user-data"] != "#!/bin/sh\necho hooked\n" {
		t.Errorf("user-data %q", files["user-data"])
	}
}

// A hook answering in the older form (user and network data only) gets
// the minimal meta-data KubeVirt writes then, and a ConfigDrive keeps its
// devices list when a hook returns one.
func TestCloudInitHookMinimalMetadata(t *testing.T) {
	p, _ := newPreparer(t)
	p.Hooks = hookFunc(func(d *CloudInitData) (*CloudInitData, error) {
		return &CloudInitData{DataSource: d.DataSource, UserData: "new", DevicesData: json.RawMessage(`[{"type":"nic","bus":"pci","address":"0000:01:00.0","tags":["a"]}]`)}, nil
	})
	vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitConfigDrive: &v1.CloudInitConfigDriveSource{UserData: "old"}}})
	if _, err := p.Prepare(context.Background(), vmi, nil); err != nil {
		t.Fatal(err)
	}
	files := readISO(t, p.Layout.CloudInitConfigDriveISO("ns1", "testvm"))
	var meta map[string]any
	if err := json.Unmarshal([]byte(files["openstack/latest/meta_data.json"]), &meta); err != nil {
		t.Fatal(err)
	}
	if files["openstack/latest/user_data"] != "new" || meta["instance_id"] != "testvm.ns1" || meta["hostname"] != nil || meta["devices"] == nil {
		t.Errorf("files %v", files)
	}
}

func TestCloudInitHookErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		hook hookFunc
		want string
	}{
		{"hook fails", func(*CloudInitData) (*CloudInitData, error) { return nil, errors.New("sidecar x said no") },
			"prepare volume ci: PreCloudInitIso hook: sidecar x said no"},
		{"source changed", func(d *CloudInitData) (*CloudInitData, error) {
			return &CloudInitData{DataSource: DataSourceConfigDrive, UserData: "x"}, nil
		}, `PreCloudInitIso hook: returned data source "configDrive" for a noCloud volume`},
		{"nothing", func(*CloudInitData) (*CloudInitData, error) { return nil, nil }, "PreCloudInitIso hook: returned no data for a noCloud volume"},
		{"emptied", func(d *CloudInitData) (*CloudInitData, error) {
			return &CloudInitData{DataSource: d.DataSource}, nil
		}, "prepare volume ci: cloud-init data: user data or network data is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := newPreparer(t)
			p.Hooks = c.hook
			vmi := vmiWith(v1.Volume{Name: "ci", VolumeSource: v1.VolumeSource{CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "x"}}})
			_, err := p.Prepare(context.Background(), vmi, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if _, err := os.Stat(p.Layout.CloudInitNoCloudISO("ns1", "testvm")); !os.IsNotExist(err) {
				t.Errorf("ISO left behind after the failure: %v", err)
			}
		})
	}
}
