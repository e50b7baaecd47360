package pod

import (
	"fmt"
	"os/user"
	"strconv"
)

// LookupUser returns the ids of an unprivileged account to run launchers,
// their libvirt daemons and QEMU as; root is refused.
func LookupUser(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q (runs the launcher and QEMU; scripts/install-deps creates it): %w", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if uid == 0 {
		return 0, 0, fmt.Errorf("user %q is root: launchers run unprivileged", name)
	}
	return uid, gid, nil
}
