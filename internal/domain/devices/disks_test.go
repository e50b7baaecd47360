package devices

import (
	"errors"
	"slices"
	"testing"

	"libvirt.org/go/libvirtxml"
)

// TestOrphanNodes: QEMU's refusal of an attach's node name as a duplicate
// names the node pair to remove, format node first; other errors none.
func TestOrphanNodes(t *testing.T) {
	err := errors.New("internal error: unable to execute QEMU command 'blockdev-add': Duplicate nodes with node-name='libvirt-6-storage'")
	if got := orphanNodes(err); !slices.Equal(got, []string{"libvirt-6-format", "libvirt-6-storage"}) {
		t.Errorf("orphanNodes = %q", got)
	}
	for _, e := range []error{nil, errors.New("non unique alias detected: ua-hp"), errors.New("Duplicate nodes with node-name='mine'")} {
		if got := orphanNodes(e); got != nil {
			t.Errorf("orphanNodes(%v) = %q, want none", e, got)
		}
	}
}

// TestOrphanDevice: QEMU's refusal of the attached disk's device id as a
// duplicate names the device to remove, only for the disk's own user
// alias; the format node under it names its node pair.
func TestOrphanDevice(t *testing.T) {
	err := errors.New("internal error: unable to execute QEMU command 'device_add': Duplicate device ID 'ua-hp'")
	if got := orphanDevice(err, &libvirtxml.DomainAlias{Name: "ua-hp"}); got != "ua-hp" {
		t.Errorf("orphanDevice = %q, want ua-hp", got)
	}
	for _, c := range []struct {
		err   error
		alias *libvirtxml.DomainAlias
	}{
		{nil, &libvirtxml.DomainAlias{Name: "ua-hp"}},
		{err, &libvirtxml.DomainAlias{Name: "ua-other"}},
		{err, nil},
		{errors.New("internal error: Duplicate device ID 'scsi0-0-0-1'"), &libvirtxml.DomainAlias{Name: "scsi0-0-0-1"}},
		{errors.New("non unique alias detected: ua-hp"), &libvirtxml.DomainAlias{Name: "ua-hp"}},
	} {
		if got := orphanDevice(c.err, c.alias); got != "" {
			t.Errorf("orphanDevice(%v, %v) = %q, want none", c.err, c.alias, got)
		}
	}
	if got := nodesUnder("libvirt-7-format"); !slices.Equal(got, []string{"libvirt-7-format", "libvirt-7-storage"}) {
		t.Errorf("nodesUnder = %q", got)
	}
	for _, n := range []string{"", "libvirt-7-storage", "libvirt--format", "libvirt-x-format", "drive-ua-hp"} {
		if got := nodesUnder(n); got != nil {
			t.Errorf("nodesUnder(%q) = %q, want none", n, got)
		}
	}
}
