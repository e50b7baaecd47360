package vmi

import (
	"fmt"
	"os"

	v1 "kubevirt.io/api/core/v1"
)

// LoadVMFile reads a manifest the way LoadFile does and returns the
// VirtualMachine it holds, or nil when it holds a VirtualMachineInstance.
// The VMI a VirtualMachine starts (LoadFile) loses what only the VM has:
// its run strategy and its dataVolumeTemplates; standalone runs need both.
func LoadVMFile(path string) (*v1.VirtualMachine, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if st.Size() > MaxManifestBytes {
		return nil, fmt.Errorf("load %s: file is %d bytes, more than the %d allowed", path, st.Size(), MaxManifestBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	vm, err := ParseVM(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return vm, nil
}

// ParseVM decodes a manifest strictly, as Parse does, and returns the
// VirtualMachine it holds, or nil when it holds a VirtualMachineInstance.
func ParseVM(data []byte) (*v1.VirtualMachine, error) {
	doc, err := singleDocument(data)
	if err != nil {
		return nil, err
	}
	tree, err := parseTree(doc)
	if err != nil {
		return nil, err
	}
	root, ok := tree.(*object)
	if !ok {
		return nil, fmt.Errorf("manifest is a %s, not an object", describe(tree))
	}
	kind, err := kindOf(root)
	if err != nil || kind != kindVM {
		return nil, err
	}
	vm := &v1.VirtualMachine{}
	if err := newChecker().decode(root, vm); err != nil {
		return nil, err
	}
	return vm, nil
}
