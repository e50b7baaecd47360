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

// TestVerbKinds: each verb has a name for its messages, and only the verbs
// that act on a running guest fail without a domain.
func TestVerbKinds(t *testing.T) {
	for _, c := range []struct {
		k           verbKind
		name        string
		needsDomain bool
	}{
		{verbPause, "pause", true},
		{verbUnpause, "unpause", true},
		{verbShutdown, "shut down", false},
		{verbKill, "kill", false},
		{verbDelete, "delete", false},
		{verbReset, "reset", true},
		{verbSoftReboot, "soft reboot", true},
	} {
		if got := c.k.String(); got != c.name {
			t.Errorf("verb %d: String() = %q, want %q", int(c.k), got, c.name)
		}
		if got := c.k.needsDomain(); got != c.needsDomain {
			t.Errorf("%s: needsDomain() = %v, want %v", c.name, got, c.needsDomain)
		}
	}
	if len(verbNames) != int(verbSoftReboot)+1 {
		t.Errorf("%d verb names for %d verbs", len(verbNames), int(verbSoftReboot)+1)
	}
}
