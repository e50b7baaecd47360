package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/consolehub"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// drive starts the guest (its source's start: a Sync, or a migration in),
// streams the console and waits for the guest to end.
func (r *runner) drive(ctx context.Context) error {
	client, err := r.waitReady(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return errInterrupted
		}
		return err
	}
	defer client.Close()
	// The console outlives ctx: it shows the guest's shutdown after Ctrl-C.
	consoleCtx, closeConsole := context.WithCancel(context.Background())
	defer closeConsole()
	consoleDone, err := r.cfg.guest.start(ctx, consoleCtx, r, client)
	if err != nil {
		return err
	}
	r.started = true
	r.progress("VM %s/%s is running; console: vlctl console %s/%s (socket %s)",
		r.vmi.Namespace, r.vmi.Name, r.vmi.Namespace, r.vmi.Name, r.consoleSocket())
	if consoleDone == nil {
		consoleDone = r.streamConsole(consoleCtx, 5*time.Second)
	}
	started := Started{WorkDir: r.workDir, Layout: r.layout, Socket: r.layout.ReadySocket()}
	if r.pod.net != nil {
		if !r.cfg.Quiet {
			printForwards(r.cfg.Status, r.pod.net)
		}
		started.OutsideNS = r.pod.net.OutsideName
		started.PodAddress = r.pod.net.Pod4.Addr().String()
	}
	r.startedAs = &started
	if err := r.writeRecord(&started); err != nil {
		// The guest runs; only the verbs by name are missing.
		fmt.Fprintf(r.cfg.Status, "vlctl: %v (vlctl ps will not list this VM)\n", err)
	}
	stopControl, err := r.serveControl(ctx, client)
	if err != nil {
		// The guest runs; only vlctl addvolume and removevolume are missing.
		fmt.Fprintf(r.cfg.Status, "vlctl: %v (volumes cannot be plugged into this VM)\n", err)
		stopControl = func() {}
	}
	if r.cfg.Started != nil {
		r.cfg.Started(started)
	}

	stopped, err := r.waitStopped(ctx, client)
	// No request changes the VM while it is stopped and deleted.
	stopControl()
	if err != nil && ctx.Err() == nil {
		return err
	}
	if !stopped { // interrupted: graceful shutdown, as the handler does on deletion
		fmt.Fprintln(r.cfg.Status, "vlctl: shutting the guest down (interrupt again to destroy it at once)")
		if err := r.shutdown(client); err != nil {
			return err
		}
	}
	// Let the console drain what the guest printed last.
	select {
	case <-consoleDone:
	case <-time.After(2 * time.Second):
		closeConsole()
	}
	select {
	case <-r.pod.monitor.Done(): // nothing left to delete
		return r.waitMonitor(time.Minute)
	default:
	}
	delCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := client.Delete(delCtx, r.vmi); err != nil && !cmdclient.IsDisconnected(err) {
		// The launcher may be ending by itself (its guest is off and it
		// already removed its socket): that is the normal end.
		select {
		case <-r.pod.monitor.Done():
			return r.waitMonitor(time.Minute)
		case <-time.After(5 * time.Second):
			return fmt.Errorf("delete domain: %w", err)
		}
	}
	return r.waitMonitor(45 * time.Second)
}

// readyWait is how long vlctl run waits for the launcher to serve.
const readyWait = 60 * time.Second

func (r *runner) waitReady(ctx context.Context) (*cmdclient.Client, error) {
	wctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	if err := r.pod.monitor.WaitReady(wctx, r.layout.ReadySocket()); err != nil {
		var exited *pod.ExitedError
		switch {
		case errors.As(err, &exited):
			return nil, r.withLauncherLog(fmt.Errorf("launcher exited before it was ready: %w", err))
		case ctx.Err() == nil:
			return nil, r.withLauncherLog(fmt.Errorf("launcher not ready after %v", readyWait))
		}
		return nil, err
	}
	c, err := cmdclient.DialChecked(ctx, r.layout.ReadySocket(), peerBelow(r.pod.monitor.Cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("dial launcher: %w", err)
	}
	return c, nil
}

// peerBelow checks that a unix socket is served by a process below pid
// (the run's monitor): the launcher user owns the directories the sockets
// are in, and every VM's processes may run as that user, so the path alone
// does not say whose socket it is. The listener's kernel credentials do.
func peerBelow(pid int) func(net.Conn) error {
	return func(conn net.Conn) error {
		_, err := unixgrpc.PeerBelow(conn, pid, fmt.Sprintf("this run (monitor pid %d)", pid))
		return err
	}
}

// streamConsole copies the serial console to cfg.Console until the guest
// closes it. The console's socket may take up to wait to appear.
func (r *runner) streamConsole(ctx context.Context, wait time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sock := r.layout.SerialSocket(string(r.vmi.UID))
		var conn net.Conn
		for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
			c, err := net.Dial("unix", sock)
			if err == nil {
				if err := peerBelow(r.pod.monitor.Cmd.Process.Pid)(c); err != nil {
					c.Close()
					fmt.Fprintf(r.cfg.Status, "vlctl: serial console: %v\n", err)
					return
				}
				conn = c
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		if conn == nil {
			fmt.Fprintf(r.cfg.Status, "vlctl: no serial console at %s\n", sock)
			return
		}
		defer conn.Close()
		go func() { <-ctx.Done(); conn.Close() }()
		hub, err := consolehub.New(conn, r.cfg.Console, r.cfg.Status, r.consoleSocket())
		if err != nil {
			fmt.Fprintf(r.cfg.Status, "vlctl: %v (vlctl console by name will not attach)\n", err)
			io.Copy(r.cfg.Console, conn)
			return
		}
		defer hub.Close()
		if r.cfg.keys != nil {
			hub.AttachKeys(r.cfg.keys)
		}
		hub.Run()
	}()
	return done
}

// pumpKeys reads in (a terminal) into the channel it returns, closed at
// in's end. It outlives Run: a terminal read does not end with the run,
// and the process ends soon after.
func pumpKeys(in io.Reader) <-chan []byte {
	keys := make(chan []byte)
	go func() {
		defer close(keys)
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				keys <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				return
			}
		}
	}()
	return keys
}

// waitStopped polls the domain until it is off. It returns false when ctx
// ends first.
func (r *runner) waitStopped(ctx context.Context, c *cmdclient.Client) (bool, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var reported string // the guest agent's report last shown
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-r.pod.monitor.Done():
			return r.launcherGone()
		case <-t.C:
		}
		d, err := getDomain(ctx, c)
		st := domainState(d)
		if g := guestReport(d); err == nil && g != "" && g != reported {
			r.progress("guest agent: %s", g)
			reported = g
		}
		if err != nil {
			// The launcher ends by itself once QEMU is gone and its last
			// event is out; a refused call is then the normal end.
			select {
			case <-r.pod.monitor.Done():
				return r.launcherGone()
			case <-time.After(5 * time.Second):
				return false, err
			}
		}
		if r.away.tookDomain(d) {
			// Gone to the run that asked for it (migrateOut).
			sayMigrated(r.cfg.Status)
			return true, nil
		}
		switch st {
		case "Shutoff":
			// The same end as the launcher exiting after it, which
			// comes first depends on the machine's load: one message.
			sayPoweredOff(r.cfg.Status)
			return true, nil
		case "Crashed", "NoState":
			r.progress("guest is %s", st)
			if st == "Crashed" {
				return true, errors.New("guest crashed")
			}
			return true, nil
		}
	}
}

// launcherGone interprets the launcher's exit while the guest was running:
// status 0 means the domain ended and the launcher finished normally.
func (r *runner) launcherGone() (bool, error) {
	if r.pod.monitor.Err() != nil {
		return false, r.withLauncherLog(fmt.Errorf("launcher exited while the guest ran: %v", r.pod.monitor.Err()))
	}
	r.away.sayEnded(r.cfg.Status)
	return true, nil
}

// killWait bounds the destroy request at the end of the grace period: a
// launcher whose daemon hangs cannot carry it out, and the guest must not
// outlive its grace period by more than this and stuckVMGrace.
const killWait = 10 * time.Second

// shutdown asks for an ACPI power-off and destroys the guest when the grace
// period ends first. Like virt-handler it asks again at most every 5 s while
// the guest is neither off nor shutting down. The launcher may exit on its
// own as soon as the guest is off: that is the normal end, not an error.
func (r *runner) shutdown(c *cmdclient.Client) error {
	ctx := context.Background()
	grace := time.Duration(vmi.GracePeriodSeconds(r.vmi)) * time.Second
	deadline := time.Now().Add(grace)
	var asked time.Time
	for {
		select {
		case <-r.pod.monitor.Done():
			return nil
		default:
		}
		st, err := domainStatus(ctx, c)
		if err != nil {
			select {
			case <-r.pod.monitor.Done():
				return nil
			case <-time.After(5 * time.Second):
				return err
			}
		}
		forced := false
		select {
		case <-r.cfg.Force:
			forced = true
		default:
		}
		switch {
		case st == "Shutoff" || st == "Crashed" || st == "NoState":
			return nil
		case forced || time.Now().After(deadline):
			if forced {
				fmt.Fprintln(r.cfg.Status, "vlctl: interrupted again, destroying the guest")
			} else {
				fmt.Fprintln(r.cfg.Status, "vlctl: grace period over, destroying the guest")
			}
			kctx, cancel := context.WithTimeout(ctx, killWait)
			err := c.Kill(kctx, r.vmi)
			cancel()
			if err != nil && !cmdclient.IsDisconnected(err) {
				return r.owner.endStuck(r.cfg.Status, err)
			}
			return nil
		case st != "ShuttingDown" && time.Since(asked) >= 5*time.Second:
			asked = time.Now()
			// A request the launcher cannot carry out (its daemon hung)
			// must not hold the loop past the grace period's end.
			end := time.Now().Add(20 * time.Second)
			if d := deadline.Add(time.Second); d.Before(end) {
				end = d
			}
			sctx, cancel := context.WithDeadline(ctx, end)
			err := c.Shutdown(sctx, r.vmi)
			cancel()
			if err != nil && !cmdclient.IsDisconnected(err) {
				// The guest may have gone off between the status and the
				// request; the next status read tells.
				r.log.Info("shutdown request failed", "reason", err)
			}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-r.cfg.Force:
		}
	}
}
