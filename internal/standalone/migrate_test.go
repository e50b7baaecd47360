package standalone

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

// TestMigratable: what --migrate-from refuses, each with the reason, and
// what it takes.
func TestMigratable(t *testing.T) {
	base := func() *runrecord.Record {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Networks = []v1.Network{*v1.DefaultPodNetwork()}
		v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}
		return &runrecord.Record{Sockets: runrecord.Sockets{Control: "/run/vl/x/control.sock"}, Started: time.Now(), VMI: v}
	}
	for _, c := range []struct {
		name string
		edit func(*runrecord.Record)
		want string // "" for migratable
	}{
		{"masquerade", func(*runrecord.Record) {}, ""},
		{"no network", func(r *runrecord.Record) {
			r.VMI.Spec.Networks, r.VMI.Spec.Domain.Devices.Interfaces = nil, nil
		}, ""},
		{"starting", func(r *runrecord.Record) { r.Started = time.Time{} }, "not running yet"},
		{"old vlctl", func(r *runrecord.Record) { r.Control = "" }, "takes no requests"},
		{"host storage", func(r *runrecord.Record) {
			r.Grants = []runrecord.Grant{{Path: "/srv/d.img"}}
			r.Volumes = map[string]string{"claim1": "/srv/d.img"}
			r.VMI.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}}}
		}, ""},
		{"host storage, mappings not recorded", func(r *runrecord.Record) {
			r.Grants = []runrecord.Grant{{Path: "/srv/d.img"}}
			r.VMI.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}}}}
		}, "did not record its --volume mappings"},
		{"hostDisk alone", func(r *runrecord.Record) {
			r.Grants = []runrecord.Grant{{Path: "/srv/hd.img"}}
			r.VMI.Spec.Volumes = []v1.Volume{{Name: "hd", VolumeSource: v1.VolumeSource{HostDisk: &v1.HostDisk{Path: "/srv/hd.img"}}}}
		}, ""},
		{"published", func(r *runrecord.Record) { r.Published = []string{"127.0.0.1:8080->80/tcp"} }, ""},
		{"hotplugged volume", func(r *runrecord.Record) {
			r.VMI.Status.VolumeStatus = []v1.VolumeStatus{{Name: "hp", HotplugVolume: &v1.HotplugVolumeStatus{}}}
		}, "volume hp was plugged in"},
		{"bridge", func(r *runrecord.Record) {
			r.VMI.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
		}, "interfaces[0] (default): the bridge binding"},
		{"secondary network", func(r *runrecord.Record) {
			r.VMI.Spec.Networks = append(r.VMI.Spec.Networks, v1.Network{Name: "second"})
		}, "spec.networks: 2 networks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := base()
			c.edit(r)
			err := migratable(r)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestMigrationOptions: KubeVirt's defaults, and the bandwidth cap.
func TestMigrationOptions(t *testing.T) {
	o, err := migrationOptions("")
	if err != nil || o.ProgressTimeout != 150 || o.CompletionTimeoutPerGiB != 150 || !o.Bandwidth.IsZero() || o.AllowPostCopy || o.AllowAutoConverge {
		t.Errorf("defaults: %+v, %v; want KubeVirt's (150 s, 150 s/GiB, no cap, no assists)", o, err)
	}
	if o, err := migrationOptions("64Mi"); err != nil || o.Bandwidth.Value() != 64<<20 {
		t.Errorf("64Mi: %+v, %v", o.Bandwidth, err)
	}
	for _, bad := range []string{"fast", "-1Mi", "0"} {
		if _, err := migrationOptions(bad); err == nil || !strings.Contains(err.Error(), "--migration-bandwidth") {
			t.Errorf("%q: %v, want an error naming --migration-bandwidth", bad, err)
		}
	}
}

// TestSourceImages: the run taking a guest over gets the files the
// source's images were pulled to, and a clear error when one is gone.
func TestSourceImages(t *testing.T) {
	dir := t.TempDir()
	disk := filepath.Join(dir, "abc-disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	src := &runrecord.Entry{Record: runrecord.Record{Name: "m", Namespace: "default",
		Takeover: runrecord.Takeover{Images: map[string]string{"registry.example/disk:1": disk}}}}
	got, err := sourceImages(src)
	if err != nil || got["registry.example/disk:1"] != disk {
		t.Errorf("got %v, %v; want the recorded file", got, err)
	}
	src.Images[kernelBootKey("registry.example/kernel:1", "/boot/vmlinuz")] = filepath.Join(dir, "gone")
	if _, err := sourceImages(src); err == nil || !strings.Contains(err.Error(), "registry.example/kernel:1 /boot/vmlinuz: its pulled file is gone") {
		t.Errorf("a file gone from the cache: %v", err)
	}
}
