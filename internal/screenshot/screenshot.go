package screenshot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Request names what to take and where.
type Request struct {
	// Socket is the daemon's unix socket, URI the driver to open on it
	// ("qemu:///session").
	Socket, URI string
	// Domain is the domain's name.
	Domain string
	// Limit bounds the image: a larger one is an error, and nothing more
	// of it is read.
	Limit int
}

// Take returns the primary display's image and its MIME type as libvirt
// gives them (virDomainScreenshot, screen 0). Everything happens on a
// connection of its own, closed before Take returns, within ctx, which
// must carry a deadline.
func Take(ctx context.Context, r Request) (mime string, data []byte, err error) {
	if _, ok := ctx.Deadline(); !ok {
		return "", nil, errors.New("screenshot: the request has no deadline")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", r.Socket)
	if err != nil {
		return "", nil, fmt.Errorf("screenshot: connect to libvirt: %w", err)
	}
	defer conn.Close()
	// The context's end, whenever it comes, ends every read and write. The
	// connection gets no deadline of its own: one equal to the context's
	// could fire a moment before the context reports its end, and the
	// error would then not say that the deadline passed.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	c := &client{conn: conn, r: bufio.NewReader(conn)}
	mime, data, err = c.screenshot(r)
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	if err != nil {
		return "", nil, fmt.Errorf("screenshot of domain %s: %w", r.Domain, err)
	}
	return mime, data, nil
}

type client struct {
	conn   net.Conn
	r      *bufio.Reader
	serial uint32
}

func (c *client) screenshot(r Request) (string, []byte, error) {
	auth, err := c.call(procAuthList, nil)
	if err != nil {
		return "", nil, fmt.Errorf("auth list: %w", err)
	}
	if err := authNoneOffered(auth); err != nil {
		return "", nil, err
	}
	var open xdrWriter
	open.optString(r.URI)
	open.uint32(0)
	if _, err := c.call(procOpen, open.Bytes()); err != nil {
		return "", nil, fmt.Errorf("open %s: %w", r.URI, err)
	}
	var lookup xdrWriter
	lookup.string(r.Domain)
	dom, err := c.call(procLookupName, lookup.Bytes())
	if err != nil {
		return "", nil, fmt.Errorf("look up the domain: %w", err)
	}
	// remote_nonnull_domain: name, 16-byte UUID, id; passed back as it came.
	x := &xdrReader{b: dom}
	x.string()
	x.opaque(16)
	x.uint32()
	if x.err != nil {
		return "", nil, fmt.Errorf("look up the domain: %w", x.err)
	}
	var shot xdrWriter
	shot.Write(dom[:len(dom)-len(x.b)])
	shot.uint32(0) // screen
	shot.uint32(0) // flags
	return c.stream(procScreenshot, shot.Bytes(), r.Limit)
}

// authNoneOffered checks remote_auth_list_ret: the daemons a launcher
// starts need no authentication on their own socket.
func authNoneOffered(payload []byte) error {
	x := &xdrReader{b: payload}
	n := x.uint32()
	for i := uint32(0); i < n && x.err == nil; i++ {
		if x.uint32() == authNone {
			return nil
		}
	}
	if x.err != nil {
		return fmt.Errorf("auth list: %w", x.err)
	}
	return errors.New("the libvirt daemon asks for authentication")
}

// call sends one call and returns its reply's payload; packets of other
// serials are not ours and are skipped.
func (c *client) call(proc uint32, args []byte) ([]byte, error) {
	serial := c.next()
	if err := writePacket(c.conn, c.header(proc, serial), args); err != nil {
		return nil, err
	}
	for {
		h, p, err := readPacket(c.r)
		if err != nil {
			return nil, err
		}
		if h.Serial != serial || h.Program != remoteProgram || h.Type != typeReply {
			continue
		}
		if h.Status == statusErr {
			return nil, remoteError(p)
		}
		return p, nil
	}
}

// next numbers a new call.
func (c *client) next() uint32 {
	c.serial++
	return c.serial
}

func (c *client) header(proc, serial uint32) header {
	return header{Program: remoteProgram, Version: remoteVersion, Procedure: proc, Type: typeCall, Serial: serial, Status: statusOK}
}

// stream sends a call whose answer is a reply (the MIME type) and a
// download stream (the image), in whichever order they come: a stream
// packet with data, a stream packet without data (the end), or one with the
// error status.
func (c *client) stream(proc uint32, args []byte, limit int) (string, []byte, error) {
	serial := c.next()
	if err := writePacket(c.conn, c.header(proc, serial), args); err != nil {
		return "", nil, err
	}
	var (
		mime       string
		replied    bool
		ended      bool
		data       bytes.Buffer
		overLimit  bool
		streamErr  error
		replyError error
	)
	for !replied || !ended {
		h, p, err := readPacket(c.r)
		if err != nil {
			return "", nil, err
		}
		if h.Serial != serial || h.Program != remoteProgram {
			continue
		}
		switch {
		case h.Type == typeReply && h.Status == statusErr:
			replyError = remoteError(p)
			replied, ended = true, true // no stream follows a failed call
		case h.Type == typeReply:
			x := &xdrReader{b: p}
			mime, _ = x.optString()
			if x.err != nil {
				return "", nil, fmt.Errorf("reply: %w", x.err)
			}
			replied = true
		case h.Type == typeStream && h.Status == statusErr:
			streamErr = remoteError(p)
			ended = true
		case h.Type == typeStream && h.Status == statusCont && len(p) > 0:
			if data.Len()+len(p) > limit {
				overLimit = true
				ended = true // the connection is closed: nothing more is read
				break
			}
			data.Write(p)
		case h.Type == typeStream:
			ended = true
		}
		if overLimit {
			return "", nil, fmt.Errorf("larger than %d bytes", limit)
		}
	}
	switch {
	case replyError != nil:
		return "", nil, replyError
	case streamErr != nil:
		return "", nil, streamErr
	case data.Len() == 0:
		return "", nil, errors.New("libvirt sent no image")
	}
	if mime == "" {
		m, err := imageMIME(data.Bytes())
		if err != nil {
			return "", nil, err
		}
		mime = m
	}
	return mime, data.Bytes(), nil
}

// imageMIME names the formats QEMU's screendump writes for libvirt (PNG
// when QEMU can, else PPM), for a reply that names none.
func imageMIME(data []byte) (string, error) {
	switch {
	case bytes.HasPrefix(data, []byte("P6")):
		return "image/x-portable-pixmap", nil
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png", nil
	}
	return "", fmt.Errorf("image in an unknown format (starts %q)", data[:min(len(data), 8)])
}
