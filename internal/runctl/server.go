package runctl

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/relay"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// Listen makes the control socket at path, mode 0600. Its directory must
// be root's and writable by no one else, so that the path is root's to
// chmod; the peer check of Serve is what decides.
func Listen(path string) (net.Listener, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// Handler serves one request on conn, from the process peerPID, and
// answers it (WriteReply). conn's deadline is Timeout from the request's
// start; a handler that takes longer moves it.
type Handler func(conn *net.UnixConn, peerPID int, req Request)

// Serve accepts on ln until it is closed, serving one connection at a time
// (others wait in the listen backlog): a request from any user but root,
// one that does not parse and one of an operation unknown here are
// answered with an error without reaching handle. It outlives transient
// accept errors (a vlctl out of descriptors), each told to report.
func Serve(ln net.Listener, report func(error), handle Handler) {
	relay.AcceptLoop(ln, report, func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(Timeout))
		conn, ok := c.(*net.UnixConn)
		if !ok {
			return
		}
		var rep Reply
		if cred, err := unixgrpc.PeerCred(conn); err != nil || cred.Uid != 0 {
			rep.Error = "only root may change a running VM"
		} else if req, err := decode(conn); err != nil {
			rep.Error = err.Error()
		} else {
			handle(conn, int(cred.Pid), req)
			return
		}
		if _, err := WriteReply(conn, rep, nil); err != nil {
			report(err)
		}
	})
}

// WriteReply answers on conn, with the descriptors fds (SCM_RIGHTS, in the
// order rep.Ports names them) when there are any. sent reports whether
// they went: they go with the answer's first byte, so once sent the
// requester has them even when the rest of the answer fails.
func WriteReply(conn *net.UnixConn, rep Reply, fds []int) (sent bool, err error) {
	b, err := json.Marshal(rep)
	if err != nil {
		return false, err
	}
	b = append(b, '\n')
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := conn.WriteMsgUnix(b, oob, nil)
	sent = n > 0 && len(fds) > 0
	if err == nil && n < len(b) {
		_, err = conn.Write(b[n:])
	}
	return sent, err
}

// Withdrawn is closed when the requester on conn closes its side (or
// ends): how a migrating run withdraws its request. What follows the
// request (its newline) is read and dropped.
func Withdrawn(conn net.Conn) <-chan struct{} {
	withdrawn := make(chan struct{})
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := conn.Read(buf); err != nil {
				break
			}
		}
		close(withdrawn)
	}()
	return withdrawn
}
