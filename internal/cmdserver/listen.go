package cmdserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// Listen creates the unix socket at path, readable and writable by its
// owner only (0600, whatever the umask), replacing a stale socket file.
//
// The socket is bound inside a fresh 0700 directory next to path, chmod'ed
// there and then renamed into place, so there is no moment at which path
// exists with looser permissions. The listener does not remove the socket
// file on Close: the launcher renames it (launcher-init-sock ->
// launcher-sock), so removal is the caller's business.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen on %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	tmp, err := os.MkdirTemp(dir, ".sock-")
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	tmpSock := filepath.Join(tmp, "s")
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmpSock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	lis.SetUnlinkOnClose(false)
	if err := os.Chmod(tmpSock, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	if err := os.Rename(tmpSock, path); err != nil {
		lis.Close()
		return nil, fmt.Errorf("move socket into place at %s: %w", path, err)
	}
	return lis, nil
}
