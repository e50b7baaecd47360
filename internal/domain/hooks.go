package domain

import (
	"context"
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"
)

// applyHooks runs the OnDefineDomain hooks on the converter's XML. What
// they return must still be a domain of the same name: the manager finds
// its domain by name.
func (x *syncer) applyHooks(ctx context.Context, v *v1.VirtualMachineInstance, xml, name string) (string, error) {
	out, err := x.hooks.OnDefineDomain(ctx, xml, v)
	if err != nil {
		return "", fmt.Errorf("define domain %s: %w", name, err)
	}
	if out == xml {
		return out, nil
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(out); err != nil {
		return "", fmt.Errorf("define domain %s: the XML from the OnDefineDomain hook sidecars does not parse: %w", name, err)
	}
	if d.Name != name {
		return "", fmt.Errorf("define domain %s: the OnDefineDomain hook sidecars renamed the domain to %q", name, d.Name)
	}
	return out, nil
}
