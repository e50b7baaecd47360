package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// Daemon is a guest agent reached from outside its launcher: a libvirt
// connection of its own to the daemon that runs the domain, whose
// virDomainQemuAgentCommand carries each command (vlctl exec and cp).
// The daemon serializes it with the launcher's own agent commands.
type Daemon struct {
	conn net.Conn
	l    *libvirt.Libvirt
	dom  libvirt.Domain
	stop func() bool
}

// daemonCommandTimeout is the daemon's wait for one agent answer, in
// seconds: a file chunk under TCG takes well under one.
const daemonCommandTimeout = 30

// DialDaemon connects to the daemon's unix socket, has check vet the
// connection before a byte is sent (the socket lies in a directory the
// VM's user can change: check is who must be listening), opens uri and
// finds the domain. Every call on the connection ends once ctx does.
func DialDaemon(ctx context.Context, socket, uri, domain string, check func(net.Conn) error) (*Daemon, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("connect to libvirt: %w", err)
	}
	if err := check(conn); err != nil {
		conn.Close()
		return nil, err
	}
	// go-libvirt's calls take no context: the connection's end ends them.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	l := libvirt.NewWithDialer(connDialer{conn})
	dd := &Daemon{conn: conn, l: l, stop: stop}
	if err := l.ConnectToURI(libvirt.ConnectURI(uri)); err != nil {
		dd.Close()
		return nil, dd.ctxErr(ctx, fmt.Errorf("open %s: %w", uri, err))
	}
	if dd.dom, err = l.DomainLookupByName(domain); err != nil {
		dd.Close()
		return nil, dd.ctxErr(ctx, fmt.Errorf("look up domain %s: %w", domain, err))
	}
	return dd, nil
}

// ctxErr names ctx's end when that is what broke the call.
func (d *Daemon) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// Run is a Runner: one agent command through the daemon.
func (d *Daemon) Run(ctx context.Context, command string) (string, error) {
	type answer struct {
		r   libvirt.OptString
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := d.l.QEMUDomainAgentCommand(d.dom, command, daemonCommandTimeout, 0)
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			return "", a.err
		}
		if len(a.r) == 0 {
			return "", errors.New("empty reply")
		}
		return a.r[0], nil
	case <-ctx.Done():
		// The call's answer is of no use any more: the connection goes.
		d.conn.Close()
		return "", ctx.Err()
	}
}

// Close ends the connection.
func (d *Daemon) Close() {
	d.stop()
	done := make(chan struct{})
	go func() { d.l.Disconnect(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	d.conn.Close()
}

// connDialer hands go-libvirt the connection already made and checked.
type connDialer struct{ c net.Conn }

func (c connDialer) Dial() (net.Conn, error) { return c.c, nil }
