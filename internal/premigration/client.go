package premigration

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// KubeVirt's paths in the launcher pod (layout.Default()): the server's
// socket, /var/run/kubevirt/migration-hook-socket, and the file left in
// the backend storage volume (the VM's persistent EFI variables and TPM
// state) when the domain has migrated away,
// /var/run/kubevirt-private/backend-storage-meta/migrated: after an
// interrupted migration virt-controller looks for it to know which of the
// two volumes is current.
var (
	DefaultSocket   = layout.Default().MigrationHookSocket()
	DefaultMigrated = layout.Default().MigratedMarker()
)

// Call is the libvirt qemu hook (args: domain, operation, sub-operation,
// extra). For "migrate begin" it passes the incoming XML from in to the
// server at socket and writes its answer to out; with no server there
// (the pod runs without the pre-migration hooks) it writes nothing, and
// libvirt keeps the XML. For "release end migrated" it leaves the migrated
// marker when its directory exists (libvirt 9.0, our image's, passes "-"
// there, not the reason: the source's launcher leaves the marker itself
// when its migration succeeded). Anything else: nothing.
func Call(args []string, in io.Reader, out io.Writer, socket, migrated string) error {
	if len(args) < 3 {
		return nil
	}
	op, sub, extra := args[1], args[2], ""
	if len(args) > 3 {
		extra = args[3]
	}
	switch {
	case op == "migrate" && sub == "begin":
		return forward(socket, in, out)
	case op == "release" && sub == "end" && extra == "migrated":
		return MarkMigrated(migrated)
	}
	return nil
}

// forward is one exchange with the server, within exchangeTimeout.
func forward(socket string, in io.Reader, out io.Writer) error {
	conn, err := net.DialTimeout("unix", socket, exchangeTimeout)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pre-migration hook server: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(exchangeTimeout))
	if _, err := io.Copy(conn, in); err != nil {
		return fmt.Errorf("send the domain XML: %w", err)
	}
	conn.(*net.UnixConn).CloseWrite()
	answer, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("read the edited domain XML: %w", err)
	}
	if len(answer) == 0 {
		return errors.New("the pre-migration hook server failed: no domain XML came back")
	}
	_, err = out.Write(answer)
	return err
}

// MarkMigrated leaves the migrated marker, readable by all, when its
// directory (the backend storage volume's mount) exists.
func MarkMigrated(path string) error {
	if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("migrated marker: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("migrated marker: %w", err)
	}
	return f.Close()
}
