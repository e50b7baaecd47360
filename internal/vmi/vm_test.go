package vmi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

// TestLoadVMFile: a VM manifest yields its run strategy and
// dataVolumeTemplates; a VMI manifest yields nil; errors name the file.
func TestLoadVMFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	vm, err := LoadVMFile(write("vm.yaml", `---
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: v
spec:
  runStrategy: RerunOnFailure
  dataVolumeTemplates:
  - metadata:
      name: dv1
    spec:
      source:
        blank: {}
      storage:
        resources:
          requests:
            storage: 3Gi
  template:
    spec:
      domain:
        devices: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	if vm == nil || vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != v1.RunStrategyRerunOnFailure {
		t.Fatalf("run strategy not read: %+v", vm)
	}
	if len(vm.Spec.DataVolumeTemplates) != 1 || vm.Spec.DataVolumeTemplates[0].Name != "dv1" ||
		vm.Spec.DataVolumeTemplates[0].Spec.Storage.Resources.Requests.Storage().String() != "3Gi" {
		t.Errorf("dataVolumeTemplates: %+v", vm.Spec.DataVolumeTemplates)
	}
	vm, err = LoadVMFile(write("vmi.yaml", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: i\nspec: {}\n"))
	if err != nil || vm != nil {
		t.Errorf("VMI manifest: %+v, %v", vm, err)
	}
	if _, err := LoadVMFile(filepath.Join(dir, "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := LoadVMFile(write("bad.yaml", "kind: VirtualMachine\napiVersion: kubevirt.io/v1\nspec:\n  runStrategy: 3\n")); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("wrong type: %v", err)
	}
}
