package monitor

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/procfs"
)

// daemonStopTimeout is how long a dead launcher's libvirt daemon gets to
// end (it has its parent-death SIGTERM already) before SIGKILL: the new
// launcher's daemon takes its sockets and its domain status files.
const daemonStopTimeout = 5 * time.Second

// unresponsiveMarker is the file virt-handler creates beside launcher-sock
// once it has declared the launcher unresponsive
// (cmd-client StandardLauncherUnresponsiveFileName): from then on it fails
// the VMI whatever answers on the socket.
const unresponsiveMarker = "launcher-unresponsive"

// unresponsive reports whether virt-handler's marker exists in the
// launcher's socket directory under shareDir.
func unresponsive(shareDir string) bool {
	_, err := os.Lstat(filepath.Join(shareDir, "sockets", unresponsiveMarker))
	return err == nil
}

// qemuAlive reports whether a QEMU of this tree runs. A /proc that cannot
// be read counts as none: the old behaviour (clean up) is the safe one.
func qemuAlive(log *slog.Logger, self int) bool {
	qs, err := descendants(procRoot, self, func(p procfs.Stat) bool { return isQemu(procRoot, p) })
	if err != nil {
		log.Error("cannot list processes", "reason", err)
		return false
	}
	return len(qs) > 0
}

// daemonNames are the command names of the libvirt daemons a launcher
// starts (the monolithic daemon, the QEMU driver's, virtlogd).
var daemonNames = map[string]bool{"libvirtd": true, "virtqemud": true, "virtlogd": true}

// stopDaemons ends a dead launcher's own libvirt daemons before the next
// launcher starts its own: they were the launcher's children, and are now
// ours (orphans come to the subreaper), so only our direct children of
// those names are signalled. QEMU, swtpm and anything else stay: libvirt
// leaves its guests running when its daemon stops, and the next daemon
// reconnects to them from its status files.
func stopDaemons(log *slog.Logger, self int) {
	stopMatching(log, self, daemonStopTimeout, "libvirt daemon of the dead launcher", func(p procfs.Stat) bool {
		return p.PPID == self && daemonNames[p.Comm]
	})
}
