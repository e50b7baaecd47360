package cmdserver

import (
	"reflect"
	"testing"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// TestSyncOptionsTopology: the host topology virt-handler sends reaches
// the converter's facts, cells and siblings in the handler's order.
func TestSyncOptionsTopology(t *testing.T) {
	so, err := syncOptions(&cmdv1.VirtualMachineOptions{Topology: &cmdv1.Topology{NumaCells: []*cmdv1.Cell{
		{Id: 1, Cpus: []*cmdv1.CPU{{Id: 3, Siblings: []uint32{3, 7}}, {Id: 7, Siblings: []uint32{3, 7}}}},
		{Id: 0, Cpus: []*cmdv1.CPU{{Id: 0}}},
	}}})
	want := []facts.NUMACell{
		{ID: 1, CPUs: []facts.HostCPU{{ID: 3, Siblings: []uint{3, 7}}, {ID: 7, Siblings: []uint{3, 7}}}},
		{ID: 0, CPUs: []facts.HostCPU{{ID: 0}}},
	}
	if err != nil || !reflect.DeepEqual(so.HostNUMA, want) {
		t.Fatalf("HostNUMA = %+v, %v; want %+v", so.HostNUMA, err, want)
	}
}
