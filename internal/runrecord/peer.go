package runrecord

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// PeerOwnedBy checks that the unix socket conn was opened by a process of
// this record's run: the kernel's credentials of its listener (SO_PEERCRED)
// name a process below the vlctl run. Every run's launcher user may be the
// same user and can put any socket at the recorded path; who answers cannot
// be faked.
func (r *Record) PeerOwnedBy(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%s: not a unix socket connection", r.FullName())
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("%s: peer credentials: %w", r.FullName(), cerr)
	}
	if !r.Alive() {
		return fmt.Errorf("%s: its vlctl run (pid %d) is gone", r.FullName(), r.PID)
	}
	if int(cred.Pid) == r.PID || !procfs.IsAncestor("/proc", r.PID, int(cred.Pid)) {
		return fmt.Errorf("%s: the socket's listener (pid %d) is not a process of its vlctl run (pid %d); refused", r.FullName(), cred.Pid, r.PID)
	}
	return nil
}
