package cmdserver_test

import (
	"context"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
)

// validVMI is the smallest VMI that validates once defaulted.
func validVMI() *v1.VirtualMachineInstance {
	v := testVMI()
	v.ObjectMeta = metav1.ObjectMeta{Name: "vm1", Namespace: "ns1", UID: "U"}
	v.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("64Mi")}
	v.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root"}}
	v.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "img"}}}}
	return v
}

// TestSyncValidation: a launcher's server refuses an invalid VMI before
// the Manager sees it, naming the field; a valid one goes through, and
// the VMI the Manager gets is not the defaulted copy.
func TestSyncValidation(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := startWith(t, m)
	ctx := context.Background()
	bad := validVMI()
	bad.Spec.Volumes = append(bad.Spec.Volumes, v1.Volume{Name: "../x",
		VolumeSource: v1.VolumeSource{EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("-1Gi")}}})
	err := c.Sync(ctx, bad, nil)
	if err == nil || !strings.Contains(err.Error(), "spec.volumes[1].name") || !strings.Contains(err.Error(), "spec.volumes[1].emptyDisk.capacity") {
		t.Errorf("Sync of an invalid VMI: %v, want both fields named", err)
	}
	if len(m.Ops) != 0 {
		t.Fatalf("manager called with an invalid VMI: %+v", m.Ops)
	}
	if err := c.Sync(ctx, validVMI(), nil); err != nil {
		t.Fatalf("Sync of a valid VMI: %v", err)
	}
	if got := m.Last(); got.Op != "Sync" || got.Name != "vm1" {
		t.Errorf("manager got %+v", got)
	}
	// Pause and the other verbs are not validated: they must reach a
	// domain whatever its spec.
	if err := c.Pause(ctx, testVMI()); err != nil {
		t.Errorf("Pause of a skeleton VMI: %v", err)
	}
}
