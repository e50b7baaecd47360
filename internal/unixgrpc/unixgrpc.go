// Package unixgrpc connects gRPC clients to unix sockets the way every
// client in the launcher needs it: the socket's own path as the target (no
// name resolution), no TLS, and the connection established before the first
// call, so that a peer that is not there fails within the caller's deadline
// instead of at some later RPC.
package unixgrpc

import (
	"context"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// Dial connects to the unix socket at path and waits until the connection
// is ready or ctx ends. dialPath, when not empty, is where the socket is
// actually opened (e.g. /proc/self/fd/N/name for a socket in a held
// directory); path names it in the target and in errors. The caller bounds
// the wait through ctx.
func Dial(ctx context.Context, path, dialPath string) (*grpc.ClientConn, error) {
	return DialChecked(ctx, path, dialPath, nil)
}

// DialChecked is Dial with check run on every connection made (the first
// and any reconnection) before gRPC uses it; a connection it refuses is
// closed. Callers use it to check who listens on the socket.
func DialChecked(ctx context.Context, path, dialPath string, check func(net.Conn) error) (*grpc.ClientConn, error) {
	if dialPath == "" {
		dialPath = path
	}
	var mu sync.Mutex
	var refused error // written by gRPC's dialing goroutine
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", dialPath)
		if err != nil || check == nil {
			return c, err
		}
		if err := check(c); err != nil {
			c.Close()
			mu.Lock()
			refused = err
			mu.Unlock()
			return nil, err
		}
		return c, nil
	}
	conn, err := grpc.NewClient("passthrough:///"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithAuthority("localhost"),
	)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	conn.Connect()
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		if st == connectivity.TransientFailure || !conn.WaitForStateChange(ctx, st) {
			conn.Close()
			mu.Lock()
			defer mu.Unlock()
			if refused != nil {
				return nil, fmt.Errorf("connect %s: %w", path, refused)
			}
			return nil, fmt.Errorf("connect %s: connection not established (%s)", path, st)
		}
	}
	return conn, nil
}

// PeerPID is the pid of the process at the other end of the unix socket
// connection conn, as the kernel recorded it (SO_PEERCRED: for a client,
// the process that called listen(2)). Unlike the socket's path or owner,
// it cannot be faked by whoever can write the socket's directory.
func PeerPID(conn net.Conn) (int, error) {
	cred, err := PeerCred(conn)
	if err != nil {
		return 0, err
	}
	return int(cred.Pid), nil
}

// PeerBelow checks that the process at the other end of conn is pid or a
// process below it (by /proc's parent links) and returns its pid: the
// check for a socket in a directory that processes other than pid's may
// write, where the path alone does not say whose socket it is. whose
// names pid's processes in the refusal.
func PeerBelow(conn net.Conn, pid int, whose string) (int, error) {
	peer, err := PeerPID(conn)
	if err != nil {
		return 0, err
	}
	if !procfs.IsAncestor("/proc", pid, peer) {
		return peer, fmt.Errorf("the socket's listener (pid %d) is not a process of %s; refused", peer, whose)
	}
	return peer, nil
}

// PeerCred is the kernel's credentials of the process at the other end of
// a unix socket connection (SO_PEERCRED: as it was when it connected or
// listened).
func PeerCred(conn net.Conn) (*unix.Ucred, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("peer credentials: %T is not a unix socket connection", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("peer credentials: %w", cerr)
	}
	return cred, nil
}
