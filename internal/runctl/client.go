package runctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Ask sends req to the run whose control socket is socket and returns its
// answer. Only root's requests are served. A ctx without a deadline gets
// Timeout.
func Ask(ctx context.Context, socket string, req Request) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, Timeout)
		defer cancel()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return "", fmt.Errorf("reach the run: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := json.NewEncoder(conn).Encode(req.wire()); err != nil {
		return "", fmt.Errorf("send the request: %w", err)
	}
	var rep Reply
	if err := json.NewDecoder(conn).Decode(&rep); err != nil {
		return "", fmt.Errorf("read the run's answer: %w", err)
	}
	if rep.Error != "" {
		return "", errors.New(rep.Error)
	}
	return rep.Message, nil
}

// AskMigration sends req to the source run's control socket and waits
// for the migration's end, up to limit. When ctx ends first (Ctrl-C) the
// request is withdrawn, which cancels the migration, and the answer still
// awaited: the migration may have completed all the same. The answer to a
// completed migration brings the old run's published listeners (at most
// maxFiles, the ports the run published).
func AskMigration(ctx context.Context, socket string, req Migrate, maxFiles int, limit time.Duration) (Answer, error) {
	c, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		return Answer{}, fmt.Errorf("reach the run: %w", err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(limit))
	stop := context.AfterFunc(ctx, func() { conn.CloseWrite() })
	defer stop()
	if err := json.NewEncoder(conn).Encode(req.wire()); err != nil {
		return Answer{}, fmt.Errorf("send the request: %w", err)
	}
	return ReadReply(conn, maxFiles)
}

// maxReply bounds an answer on the control socket.
const maxReply = 1 << 20

// Answer is a run's answer on the control socket with the descriptors
// that came with it.
type Answer struct {
	Reply
	Files []*os.File
	// Dropped says why descriptors that came were closed unused: the
	// answer stands (a completed migration is one), its ports are bound
	// afresh.
	Dropped error
}

// ReadReply reads the run's answer (one line of JSON) from conn, with the
// descriptors that come with it: at most maxFiles, or none is kept. On
// error none is left open.
func ReadReply(conn *net.UnixConn, maxFiles int) (a Answer, err error) {
	defer func() {
		if err != nil || a.Dropped != nil {
			CloseFiles(a.Files)
			a.Files, a.Ports = nil, nil
		}
	}()
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*max(maxFiles, 1)))
	var data []byte
	for {
		n, oobn, flags, _, rerr := conn.ReadMsgUnix(buf, oob)
		got, perr := parseRights(oob[:oobn])
		a.Files = append(a.Files, got...)
		switch {
		case perr != nil:
			a.Dropped = errors.Join(a.Dropped, perr)
		case flags&unix.MSG_CTRUNC != 0 || len(a.Files) > maxFiles:
			a.Dropped = fmt.Errorf("the answer came with more descriptors than the %d published ports", maxFiles)
		}
		data = append(data, buf[:n]...)
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[:i]
			break
		}
		switch {
		case rerr != nil:
			return a, fmt.Errorf("read the run's answer: %w", rerr)
		case n == 0:
			return a, fmt.Errorf("read the run's answer: %w", io.ErrUnexpectedEOF)
		case len(data) > maxReply:
			return a, fmt.Errorf("read the run's answer: longer than %d bytes", maxReply)
		}
	}
	if err := json.Unmarshal(data, &a.Reply); err != nil {
		return a, fmt.Errorf("read the run's answer: %w", err)
	}
	if a.Error != "" {
		return a, errors.New(a.Error)
	}
	return a, nil
}

// parseRights are the descriptors an SCM_RIGHTS message in oob brought.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	var errs []error
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "socket handed over"))
		}
	}
	return files, errors.Join(errs...)
}

// CloseFiles closes every file of files.
func CloseFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
