package standalone

import (
	"fmt"
	"io"
	"strings"

	"github.com/virtlauncher/virtlauncher/internal/pod"
)

// What the run tells its user: progress lines, the status output, the
// forwarded ports and the end of the launcher's log on an error.

// progressOut is where progress lines go: Status, or nowhere (nil) when
// Quiet.
func (r ReportOptions) progressOut() io.Writer {
	if r.Quiet {
		return nil
	}
	return r.Status
}

// progress tells what the run is doing, unless --quiet.
func (r *runner) progress(format string, a ...any) {
	if !r.cfg.Quiet {
		fmt.Fprintf(r.cfg.Status, "vlctl: "+format+"\n", a...)
	}
}

// statusf prints a line on the run's status output.
func (r *runner) statusf(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }

// printForwards says where each port the pod network forwards to the
// guest is reachable from.
func printForwards(w io.Writer, n *pod.Network) {
	for _, f := range n.Forwards(n.Plan) {
		if f.Port == 0 {
			fmt.Fprintf(w, "vlctl: interface %s: every port of the guest is reachable at %s (from namespace %s)\n", f.Iface, f.Address, n.OutsideName)
			continue
		}
		fmt.Fprintf(w, "vlctl: interface %s: guest %s/%d is reachable at %s (from namespace %s)\n", f.Iface, f.Protocol, f.Port, f.Address, n.OutsideName)
	}
}

// withLauncherLog adds the end of the launcher's log to an error, which is
// where the reason usually is. Only the last 64 KiB are read: the launcher
// and QEMU write the file.
func (r *runner) withLauncherLog(err error) error {
	if r.dir == nil {
		return err
	}
	f, rerr := r.dir.OpenRegular("launcher.log")
	if rerr != nil {
		return err
	}
	defer f.Close()
	const tail = 64 << 10
	if st, serr := f.Stat(); serr == nil && st.Size() > tail {
		f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, rerr := io.ReadAll(io.LimitReader(f, tail))
	if rerr != nil || len(b) == 0 {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Errorf("%w\nlast launcher log lines:\n%s", err, strings.Join(lines, "\n"))
}
