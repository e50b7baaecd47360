package runrecord

import (
	"fmt"
	"net"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// PeerOwnedBy checks that the unix socket conn was opened by a process of
// this record's run: the kernel's credentials of its listener (SO_PEERCRED)
// name a process below the vlctl run. Every run's launcher user may be the
// same user and can put any socket at the recorded path; who answers cannot
// be faked.
func (r *Record) PeerOwnedBy(conn net.Conn) error {
	pid, err := unixgrpc.PeerPID(conn)
	if err != nil {
		return fmt.Errorf("%s: %w", r.FullName(), err)
	}
	if !r.Alive() {
		return fmt.Errorf("%s: its vlctl run (pid %d) is gone", r.FullName(), r.PID)
	}
	if pid == r.PID || !procfs.IsAncestor("/proc", r.PID, pid) {
		return fmt.Errorf("%s: the socket's listener (pid %d) is not a process of its vlctl run (pid %d); refused", r.FullName(), pid, r.PID)
	}
	return nil
}

// PeerIsRun checks that the unix socket conn is served by this record's
// vlctl run itself (the console it shares, consoleHub), alive.
func (r *Record) PeerIsRun(conn net.Conn) error {
	pid, err := unixgrpc.PeerPID(conn)
	if err != nil {
		return fmt.Errorf("%s: %w", r.FullName(), err)
	}
	if !r.Alive() {
		return fmt.Errorf("%s: its vlctl run (pid %d) is gone", r.FullName(), r.PID)
	}
	if pid != r.PID {
		return fmt.Errorf("%s: the console socket's listener (pid %d) is not its vlctl run (pid %d); refused", r.FullName(), pid, r.PID)
	}
	return nil
}
