package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// The verbs by name find a running `vlctl run` through the record it keeps
// in a directory only root writes (internal/runrecord).

// killSignal asks a `vlctl run` to destroy its guest at once, as a second
// Ctrl-C does (vlctl kill NAME).
const killSignal = syscall.SIGUSR1

type nameFlags struct {
	namespace string
	recordDir string
}

func (n *nameFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&n.namespace, "namespace", "n", "", "namespace of the VM (needed when several namespaces have a VM of that name)")
	cmd.Flags().StringVar(&n.recordDir, "record-dir", runrecord.DefaultDir, recordDirHelp)
}

const recordDirHelp = "where running vlctl runs record themselves (the --record-dir of vlctl run)"

// find returns the live run that query names.
func (n *nameFlags) find(query string) (*runrecord.Entry, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the verbs by name need root, as vlctl run does: run them with sudo")
	}
	entries, lerr := runrecord.List(n.recordDir)
	e, err := runrecord.Match(entries, query, n.namespace)
	if err != nil && lerr != nil {
		return nil, errors.Join(err, lerr)
	}
	return e, err
}

// dialLauncher connects to the run's launcher, refusing a socket that is
// not its launcher's.
func dialLauncher(ctx context.Context, e *runrecord.Entry) (*cmdclient.Client, error) {
	c, err := cmdclient.DialChecked(ctx, e.Socket, e.PeerOwnedBy)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.FullName(), err)
	}
	return c, nil
}

// byNameRPC sends one VMIRequest RPC to the launcher of the VM named.
func byNameRPC(ctx context.Context, n *nameFlags, query, verb string, call func(*cmdclient.Client, context.Context, *v1.VirtualMachineInstance) error) error {
	e, err := n.find(query)
	if err != nil {
		return err
	}
	if e.VMI == nil {
		return fmt.Errorf("%s: its record has no VMI", e.FullName())
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := dialLauncher(ctx, e)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := call(c, ctx, e.VMI); err != nil {
		return fmt.Errorf("%s %s: %w", verb, e.FullName(), err)
	}
	return nil
}

// signalRun sends sig to the entry's vlctl run and waits up to timeout for
// it to end. A pidfd pins the process: the start time is checked again
// through it, so a pid reused since the record was read is never
// signalled.
func signalRun(e *runrecord.Entry, sig syscall.Signal, timeout time.Duration) error {
	fd, err := unix.PidfdOpen(e.PID, 0)
	if err != nil {
		return fmt.Errorf("%s: vlctl run pid %d: %w", e.FullName(), e.PID, err)
	}
	defer unix.Close(fd)
	if !e.Alive() {
		return fmt.Errorf("%s: its vlctl run (pid %d) is gone; the stale record %s is not acted on", e.FullName(), e.PID, e.Path)
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return fmt.Errorf("%s: signal vlctl run pid %d: %w", e.FullName(), e.PID, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s: vlctl run (pid %d) still running after %s", e.FullName(), e.PID, timeout)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, time.Second).Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("%s: wait for pid %d: %w", e.FullName(), e.PID, err)
		}
		if n > 0 { // readable: the process has exited
			return nil
		}
	}
}

func newByNameCmds() []*cobra.Command {
	var ps nameFlags
	var output string
	var all bool
	psCmd := &cobra.Command{
		Use:   "ps",
		Short: "List the VMs that `vlctl run` runs on this machine",
		Long: `ps lists every running vlctl run: name, namespace, the domain's state as its launcher
reports it, uptime, addresses (with the network namespace they are reachable from) and the
console socket. A record whose vlctl run is gone (killed with SIGKILL, say) is shown as stale:
vlctl gc cleans up after it. A background run (vlctl run -d) between two boots of its guest is
shown as starting; with -a, one that ended and is not removed yet (vlctl rm) as exited or failed
(vlctl logs --run NAME says why). -o json prints the same as a JSON array, for scripts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return errors.New("ps needs root, as vlctl run does: run it with sudo")
			}
			entries, lerr := runrecord.List(ps.recordDir)
			if len(entries) == 0 && lerr != nil {
				return lerr
			}
			rows := make([]psRow, 0, len(entries))
			var errs []error
			for i := range entries {
				row, err := psRowOf(cmd.Context(), &entries[i])
				rows = append(rows, row)
				errs = append(errs, err)
			}
			bgs, berr := runrecord.ListBackground(ps.recordDir)
			rows = withBackground(rows, bgs, all)
			errs = append(errs, berr)
			switch output {
			case "json":
				if err := writePSJSON(cmd.OutOrStdout(), rows); err != nil {
					return err
				}
			default:
				writePS(cmd.OutOrStdout(), rows, time.Now())
			}
			// Why a state is unknown, after the table.
			if err := errors.Join(append(errs, lerr)...); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "vlctl:", err)
			}
			return nil
		},
	}
	ps.register(psCmd)
	psCmd.Flags().BoolVarP(&all, "all", "a", false, "also the background runs that ended and are not removed yet (vlctl rm)")
	psCmd.Flags().StringVarP(&output, "output", "o", "table", "table, or json: an array of objects with name, namespace, pid, state, started, restarts, addresses (ip, netns), published, guestAddresses, console, and for an ended background run ended and error")

	var st nameFlags
	var stopTimeout time.Duration
	stop := &cobra.Command{
		Use:   "stop NAME",
		Short: "Stop a VM as Ctrl-C on its vlctl run does (ACPI shutdown, then destroy after the grace period)",
		Long: `stop asks the vlctl run of the VM to stop, as Ctrl-C on its terminal does: the guest is
shut down with ACPI, destroyed when its grace period ends, and the run removes what it made.
NAME is NAMESPACE/NAME, or NAME alone when only one namespace has a VM of that name.
stop waits for the run to end.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := st.find(args[0])
			if err != nil {
				return err
			}
			timeout := stopTimeout
			if timeout == 0 {
				// The run's own limits: the grace period, then the
				// launcher's end and cleanup.
				timeout = time.Duration(vmi.GracePeriodSeconds(e.VMI))*time.Second + 2*time.Minute
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: stopping %s (vlctl run pid %d)\n", e.FullName(), e.PID)
			if err := signalRun(e, syscall.SIGTERM, timeout); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: %s stopped\n", e.FullName())
			return nil
		},
	}
	st.register(stop)
	stop.Flags().DurationVar(&stopTimeout, "timeout", 0, "how long to wait for the run to end (default: the VM's grace period + 2m)")
	var gcRecordDir string
	var gcTimeout time.Duration
	gcCmd := &cobra.Command{
		Use:   "gc",
		Short: "Clean up after vlctl runs that ended without doing it (killed with SIGKILL, say)",
		Long: `gc cleans up after every vlctl run whose process is gone but whose record is left
(vlctl ps shows it as stale): it ends the run's processes, every process running as the
run's own user id (monitor, launcher, libvirt, QEMU: SIGTERM, then SIGKILL after --timeout;
while any survives, the record and the id stay), deletes its network namespaces, takes the
ACL entries it added out of your disk files, removes its work dir (not with --keep) and the
record, then gives back the user ids of runs that are gone (their leases in /run/vlctl/uids,
one table for the machine whatever --record-dir says).
Runs still alive are never touched. vlctl run does the same before it starts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return errors.New("gc needs root, as vlctl run does: run it with sudo")
			}
			return standalone.GC(gcRecordDir, gcTimeout, cmd.ErrOrStderr())
		},
	}
	gcCmd.Flags().StringVar(&gcRecordDir, "record-dir", runrecord.DefaultDir, recordDirHelp)
	gcCmd.Flags().DurationVar(&gcTimeout, "timeout", 30*time.Second, "how long a dead run's processes get between SIGTERM and SIGKILL")
	return []*cobra.Command{psCmd, stop, gcCmd}
}

// killByName destroys the guest at once: its vlctl run does it, and cleans
// up, as on a second Ctrl-C.
func killByName(cmd *cobra.Command, n *nameFlags, query string) error {
	e, err := n.find(query)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: destroying %s (vlctl run pid %d)\n", e.FullName(), e.PID)
	if err := signalRun(e, killSignal, 2*time.Minute); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "vlctl: %s destroyed\n", e.FullName())
	return nil
}

// psRow is one line of `vlctl ps`, and with -o json one object: its
// field names are part of vlctl's interface (docs/standalone.md).
type psRow struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// PID is the vlctl run (a background run's supervisor) holding the
	// VM.
	PID int `json:"pid"`
	// State is the domain's state as the launcher reports it (Running,
	// Paused, Shutoff, ...), or starting, stale, NoDomain or unknown.
	State   string    `json:"state"`
	Started time.Time `json:"started,omitzero"` // zero: no uptime shown
	// Restarts is how often the run's monitor started a new launcher
	// after one died, the guest running on.
	Restarts int `json:"restarts"`
	// Addresses are the pod's, each with the network namespace it is
	// reachable from; Published the host ports forwarded to the guest;
	// GuestAddresses what the guest reports.
	Addresses      []runrecord.Address `json:"addresses"`
	Published      []string            `json:"published"`
	GuestAddresses []string            `json:"guestAddresses"`
	Console        string              `json:"console"`
	// Ended and Error: when a background run ended, and why it failed.
	Ended time.Time `json:"ended,omitzero"`
	Error string    `json:"error,omitempty"`
}

// withBackground adds to rows the background runs they lack: one whose
// supervisor runs with no run recorded (starting, or waiting to boot the
// guest again) as starting, and with all, one that ended as exited or
// failed.
func withBackground(rows []psRow, bgs []runrecord.Background, all bool) []psRow {
	for _, b := range bgs {
		if slices.ContainsFunc(rows, func(r psRow) bool { return r.Name == b.Name && r.Namespace == b.Namespace }) {
			continue
		}
		row := psRow{Name: b.Name, Namespace: b.Namespace, PID: b.PID, Ended: b.Ended, Error: b.Error}
		switch {
		case b.Running:
			row.State = "starting"
		case !all:
			continue
		case b.Error != "":
			row.State = "failed"
		default:
			row.State = "exited"
		}
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, func(a, b psRow) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return rows
}

// psRowOf asks the run's launcher for the domain's state; a stale record
// is removed and shown as such. The error says why a state is unknown.
func psRowOf(ctx context.Context, e *runrecord.Entry) (psRow, error) {
	row := psRow{Name: e.Name, Namespace: e.Namespace, PID: e.PID, Console: e.Console,
		Addresses: slices.Clone(e.Addresses), Published: slices.Clone(e.Published)}
	if e.Stale {
		// Kept: it says what vlctl gc has to clean up.
		row.State = psStale
		return row, nil
	}
	if e.Started.IsZero() {
		// Recorded before its launcher is up.
		row.State = "starting"
		return row, nil
	}
	row.Started = e.Started
	// The record lies in a directory the VM's user writes: ReadRestarts
	// follows no link and reads little; a bad one leaves the count 0.
	if rec, ok, err := monitor.ReadRestarts(layout.Under(e.WorkDir).PrivateDir); err == nil && ok {
		row.Restarts = rec.Count
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := dialLauncher(ctx, e)
	if err != nil {
		row.State = "unknown"
		return row, err
	}
	defer c.Close()
	d, exists, err := c.GetDomain(ctx)
	switch {
	case err != nil:
		row.State = "unknown"
		return row, fmt.Errorf("%s: get domain: %w", e.FullName(), err)
	case !exists || d == nil:
		row.State = "NoDomain"
	default:
		row.State = d.Status.Status
		for _, i := range d.Status.Interfaces {
			row.GuestAddresses = append(row.GuestAddresses, i.IPs...)
		}
	}
	return row, nil
}

// psStale is the state of a run whose vlctl is gone.
const psStale = "stale"

// writePS prints the rows as a table.
func writePS(w io.Writer, rows []psRow, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tNAMESPACE\tSTATE\tUPTIME\tRESTARTS\tADDRESSES\tCONSOLE")
	for _, r := range rows {
		up, addrs, console, state := "-", "-", r.Console, r.State
		if console == "" {
			console = "-"
		}
		if state == psStale {
			state = "stale (vlctl gc cleans up)"
		}
		if !r.Started.IsZero() {
			up = uptime(now.Sub(r.Started))
		}
		var all []string
		for _, a := range r.Addresses {
			all = append(all, a.String())
		}
		for _, p := range r.Published {
			all = append(all, p+" (published)")
		}
		for _, ip := range r.GuestAddresses {
			all = append(all, ip+" (guest)")
		}
		if len(all) > 0 {
			addrs = strings.Join(all, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Name, r.Namespace, state, up, r.Restarts, addrs, console)
	}
	tw.Flush()
}

// writePSJSON prints the rows as a JSON array (empty lists as []).
func writePSJSON(w io.Writer, rows []psRow) error {
	for i := range rows {
		r := &rows[i]
		r.Addresses, r.Published, r.GuestAddresses = nonNil(r.Addresses), nonNil(r.Published), nonNil(r.GuestAddresses)
	}
	b, err := json.MarshalIndent(nonNil(rows), "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// checkOutput refuses an -o value that is not among the formats.
func checkOutput(output string, formats ...string) error {
	if !slices.Contains(formats, output) {
		return fmt.Errorf("-o %q: want %s", output, strings.Join(formats, " or "))
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// uptime is d in the two largest units: 45s, 3m12s, 2h05m, 3d04h.
func uptime(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// dialConsole connects to the serial console of the VM named, as its vlctl
// run shares it, refusing a socket that run does not serve.
func dialConsole(n *nameFlags, query string) (net.Conn, error) {
	e, err := n.find(query)
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("unix", e.Console, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("console of %s: %w", e.FullName(), err)
	}
	if err := e.PeerIsRun(conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
