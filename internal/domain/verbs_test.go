package domain

import (
	"testing"

	"github.com/digitalocean/go-libvirt"
)

// TestUndefineFlags: Delete undefines as KubeVirt's DeleteVMI does
// (KEEP_NVRAM | CHECKPOINTS_METADATA), so EFI variables outlive the
// domain; and it neither removes nor forces keeping TPM state (libvirt
// decides by persistent_state).
func TestUndefineFlags(t *testing.T) {
	for _, c := range []struct {
		name string
		flag libvirt.DomainUndefineFlagsValues
		want bool
	}{
		{"KEEP_NVRAM", libvirt.DomainUndefineKeepNvram, true},
		{"CHECKPOINTS_METADATA", libvirt.DomainUndefineCheckpointsMetadata, true},
		{"NVRAM (removes the variable store)", libvirt.DomainUndefineNvram, false},
		{"TPM (removes persistent TPM state)", libvirt.DomainUndefineTpm, false},
		{"KEEP_TPM", libvirt.DomainUndefineKeepTpm, false},
		{"MANAGED_SAVE", libvirt.DomainUndefineManagedSave, false},
		{"SNAPSHOTS_METADATA", libvirt.DomainUndefineSnapshotsMetadata, false},
	} {
		if got := undefineFlags&c.flag != 0; got != c.want {
			t.Errorf("%s: set = %v, want %v (flags %#x)", c.name, got, c.want, undefineFlags)
		}
	}
}
