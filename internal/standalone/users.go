package standalone

import (
	"fmt"
	"os/user"
	"strconv"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/uidpool"
)

type ids struct {
	uid, gid int
	name     string // for messages
	// groups are supplementary groups: kvm, for /dev/kvm.
	groups []uint32
}

// leasedIDs is the VM's own user: the leased id as uid and gid, and the
// kvm group when the machine has one (QEMU opens /dev/kvm, 0660
// root:kvm).
func leasedIDs(l *uidpool.Lease) ids {
	o := ids{uid: int(l.ID), gid: int(l.ID), name: fmt.Sprintf("uid %d", l.ID)}
	if g, err := user.LookupGroup("kvm"); err == nil {
		if gid, err := strconv.ParseUint(g.Gid, 10, 32); err == nil {
			o.groups = []uint32{uint32(gid)}
		}
	}
	return o
}

// credential runs a process as o.
func (o ids) credential() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid), Groups: o.groups}
}
