package storage_test

import (
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// withFilesystems adds a virtiofs filesystem, and its volume, per name.
func withFilesystems(src v1.VolumeSource, names ...string) func(*v1.VirtualMachineInstance) {
	return func(v *v1.VirtualMachineInstance) {
		for _, n := range names {
			v.Spec.Domain.Devices.Filesystems = append(v.Spec.Domain.Devices.Filesystems, v1.Filesystem{Name: n, Virtiofs: &v1.FilesystemVirtiofs{}})
			v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: n, VolumeSource: src})
		}
	}
}

func TestVirtiofs(t *testing.T) {
	cm := v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: k8sv1.LocalObjectReference{Name: "app-config"}}}
	convtest.Run(t, []convtest.Case{
		{Name: "no filesystems, no filesystem element", Absent: []string{"<filesystem"}},
		{Name: "a configMap shared by virtiofs, as KubeVirt v1.9.0 writes it", VMI: withFilesystems(cm, "config"),
			Contains: []string{
				`<filesystem type="mount" accessmode="passthrough">`,
				`<driver type="virtiofs" queue="1024"></driver>`,
				`<source socket="/var/run/kubevirt/virtiofs-containers/config.sock"></source>`,
				`<target dir="config"></target>`,
			},
			// The volume is the filesystem's, not a disk's: no ISO.
			Absent: []string{"config-map-disks"}},
		{Name: "one device per filesystem, in the spec's order", VMI: withFilesystems(v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "shared"}},
		}, "data", "logs"),
			Contains: []string{`virtiofs-containers/data.sock`, `<target dir="logs">`}},
		{Name: "standalone layout: the socket below the run's share directory", VMI: withFilesystems(cm, "config"),
			Ctx:      func(c *facts.Context) { c.Layout = layout.Under("/run/vl/ab12") },
			Contains: []string{`<source socket="/run/vl/ab12/share/virtiofs-containers/config.sock">`}},
	})
}
