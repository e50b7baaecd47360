package domain

import (
	"encoding/json"
	"reflect"
	"testing"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

// TestParseNodeTopology: virt-handler's targetNodeTopology is
// encoding/json's form of cmdv1.Topology.
func TestParseNodeTopology(t *testing.T) {
	topo := &cmdv1.Topology{NumaCells: []*cmdv1.Cell{
		{Id: 0, Cpus: []*cmdv1.CPU{{Id: 0, Siblings: []uint32{0, 2}}, {Id: 2, Siblings: []uint32{0, 2}}}},
		{Id: 1, Cpus: []*cmdv1.CPU{{Id: 1}}},
	}}
	b, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseNodeTopology(string(b))
	if err != nil {
		t.Fatal(err)
	}
	want := []facts.NUMACell{
		{ID: 0, CPUs: []facts.HostCPU{{ID: 0, Siblings: []uint{0, 2}}, {ID: 2, Siblings: []uint{0, 2}}}},
		{ID: 1, CPUs: []facts.HostCPU{{ID: 1}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s read as %+v, want %+v", b, got, want)
	}
	if _, err := parseNodeTopology(""); err == nil {
		t.Error("an empty topology was taken")
	}
}
