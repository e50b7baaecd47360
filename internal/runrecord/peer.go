package runrecord

import (
	"fmt"
	"net"

	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// PeerOwnedBy checks that the unix socket conn was opened by a process of
// this record's run: the kernel's credentials of its listener (SO_PEERCRED)
// name a process below the vlctl run. Every run's launcher user may be the
// same user and can put any socket at the recorded path; who answers cannot
// be faked.
func (r *Record) PeerOwnedBy(conn net.Conn) error {
	if !r.Alive() {
		return fmt.Errorf("%s: its vlctl run (pid %d) is gone", r.FullName(), r.PID)
	}
	whose := fmt.Sprintf("its vlctl run (pid %d)", r.PID)
	pid, err := unixgrpc.PeerBelow(conn, r.PID, whose)
	if err == nil && pid == r.PID {
		// The sockets checked so are the launcher's and its daemons', below
		// the run; the run's own are PeerIsRun's.
		err = fmt.Errorf("the socket's listener (pid %d) is not a process of %s; refused", pid, whose)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.FullName(), err)
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
