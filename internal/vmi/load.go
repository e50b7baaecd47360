package vmi

import (
	"fmt"
	"os"

	v1 "kubevirt.io/api/core/v1"
)

// Load is Parse, then SetDefaults, then Validate.
func Load(data []byte, o Options) (*v1.VirtualMachineInstance, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	vmi, _, err := parse(data, false, o)
	if err != nil {
		return nil, err
	}
	SetDefaults(vmi, o)
	if err := Validate(vmi); err != nil {
		return nil, err
	}
	return vmi, nil
}

// LoadFile is Load on the contents of a file; errors name the file.
func LoadFile(path string, o Options) (*v1.VirtualMachineInstance, error) {
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
	vmi, err := Load(data, o)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return vmi, nil
}

func (o Options) check() error {
	switch o.DefaultBinding {
	case "", BindingMasquerade, BindingBridge:
	default:
		return fmt.Errorf("options: default binding %q is not supported: want %s or %s", o.DefaultBinding, BindingMasquerade, BindingBridge)
	}
	switch o.Arch {
	case "", "amd64", "arm64", "s390x":
	default:
		return fmt.Errorf("options: architecture %q is not supported: want amd64, arm64 or s390x", o.Arch)
	}
	return nil
}
