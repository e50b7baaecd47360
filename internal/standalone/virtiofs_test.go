package standalone

import (
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// TestVirtiofsShares: configMap and Secret filesystems are served from
// the directories vlctl writes from the documents; other sources are
// refused before anything is made, naming the filesystem.
func TestVirtiofsShares(t *testing.T) {
	fsVMI := func(src v1.VolumeSource) *v1.VirtualMachineInstance {
		v := &v1.VirtualMachineInstance{}
		v.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "fs", Virtiofs: &v1.FilesystemVirtiofs{}}}
		v.Spec.Volumes = []v1.Volume{{Name: "fs", VolumeSource: src}}
		return v
	}
	l := layout.Under("/w")
	for _, c := range []struct {
		name string
		src  v1.VolumeSource
		dir  string
		err  string
	}{
		{name: "configMap", src: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: k8sv1.LocalObjectReference{Name: "c"}}},
			dir: l.ConfigMapSource("fs")},
		{name: "secret", src: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}, dir: l.SecretSource("fs")},
		{name: "PVC", src: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{}},
			err: `spec.domain.devices.filesystems[0]: volume "fs": vlctl run shares configMap and secret volumes by virtiofs`},
		{name: "downwardAPI", src: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}},
			err: "spec.domain.devices.filesystems[0]: volume \"fs\""},
	} {
		got, err := virtiofsShares(fsVMI(c.src))
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error containing %q", c.name, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case len(got) != 1 || got[0].name != "fs" || got[0].dir(l) != c.dir:
			t.Errorf("%s: %+v, want fs served from %s", c.name, got, c.dir)
		}
	}
	noVol := fsVMI(v1.VolumeSource{})
	noVol.Spec.Volumes = nil
	if _, err := virtiofsShares(noVol); err == nil || !strings.Contains(err.Error(), `spec.domain.devices.filesystems[0].name: "fs" has no volume`) {
		t.Errorf("no volume: %v", err)
	}
}

// TestVirtiofsArgs: the daemons get the command line virt-controller
// renders for a virtiofs container.
func TestVirtiofsArgs(t *testing.T) {
	got := strings.Join(virtiofsArgs("/w/share/virtiofs-containers/fs.sock", "/w/private/config-map/fs"), " ")
	want := "--socket-path=/w/share/virtiofs-containers/fs.sock --shared-dir=/w/private/config-map/fs --sandbox=none --cache=auto --migration-on-error=guest-error --migration-mode=find-paths"
	if got != want {
		t.Errorf("virtiofsArgs:\n got %s\nwant %s", got, want)
	}
}
