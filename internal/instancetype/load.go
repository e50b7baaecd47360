package instancetype

import (
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/manifest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// Loaded is a run's manifest, read and expanded.
type Loaded struct {
	// Set is the documents, sorted by kind.
	Set *manifest.Set
	// VMI is what the VM (or VMI) runs: its instancetype and preference
	// expanded, KubeVirt's defaults set, validated.
	VMI *v1.VirtualMachineInstance
	// VM is the VirtualMachine as written (nil for a VMI manifest).
	VM *v1.VirtualMachine
}

// Load reads files as `vlctl run` takes them (internal/manifest) and
// expands the VM's instancetype and preference from the documents, dir
// (--instancetypes; "" for none) and the common data. Errors name the
// document and the field.
func Load(files []string, dir string, o vmi.Options) (*Loaded, error) {
	set, err := manifest.Read(files, IsKind)
	if err != nil {
		return nil, err
	}
	store, err := NewStore(set.Others, dir)
	if err != nil {
		return nil, err
	}
	o.Expander = Expander{Store: store}
	v, err := vmi.Load(set.Main.JSON, o)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", set.Main.Origin, err)
	}
	vm, err := vmi.ParseVM(set.Main.JSON)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", set.Main.Origin, err)
	}
	return &Loaded{Set: set, VMI: v, VM: vm}, nil
}
