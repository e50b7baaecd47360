// Package screenshot takes a domain's screenshot over a libvirt connection
// of its own.
//
// A screenshot is a libvirt stream: the daemon answers the call and sends
// the image as stream packets of the same serial number. Its event loop can
// queue the first stream packet before the call's reply, and go-libvirt
// (which routes every packet of a serial to one unbuffered channel, holding
// its routing lock while it delivers) then takes a data packet for the
// reply, returns early, and blocks for good on the next packet: every later
// call on that connection waits forever. So the launcher never takes a
// screenshot on its shared connection. This package speaks the few
// procedures a screenshot needs itself, tells replies from stream packets by
// their type as libvirt's own client does, bounds the whole exchange by the
// caller's context and closes its connection at the end, whatever state the
// stream was left in.
package screenshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The libvirt RPC protocol (libvirt's src/rpc/virnetprotocol.x and
// remote_protocol.x): a packet is a big-endian length (itself included), a
// header of six words and an XDR payload.
const (
	remoteProgram  = 0x20008086
	remoteVersion  = 1
	headerLen      = 24
	lengthLen      = 4
	maxPacket      = 32 << 20 // VIR_NET_MESSAGE_MAX in libvirt 9.0
	procOpen       = 1        // REMOTE_PROC_CONNECT_OPEN
	procLookupName = 23       // REMOTE_PROC_DOMAIN_LOOKUP_BY_NAME
	procAuthList   = 66       // REMOTE_PROC_AUTH_LIST
	procScreenshot = 211      // REMOTE_PROC_DOMAIN_SCREENSHOT
	authNone       = 0        // REMOTE_AUTH_NONE
)

// Packet types and statuses (virNetMessageType, virNetMessageStatus).
const (
	typeCall   = 0
	typeReply  = 1
	typeStream = 3
	statusOK   = 0
	statusErr  = 1
	statusCont = 2
)

type header struct {
	Program, Version, Procedure, Type uint32
	Serial                            uint32
	Status                            uint32
}

// writePacket frames and writes one packet.
func writePacket(w io.Writer, h header, payload []byte) error {
	buf := make([]byte, lengthLen+headerLen, lengthLen+headerLen+len(payload))
	binary.BigEndian.PutUint32(buf[0:], uint32(lengthLen+headerLen+len(payload)))
	for i, v := range []uint32{h.Program, h.Version, h.Procedure, h.Type, h.Serial, h.Status} {
		binary.BigEndian.PutUint32(buf[lengthLen+4*i:], v)
	}
	_, err := w.Write(append(buf, payload...))
	return err
}

// readPacket reads one packet; a length outside libvirt's bounds is an
// error, never an allocation.
func readPacket(r io.Reader) (header, []byte, error) {
	var lb [lengthLen]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return header{}, nil, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n < lengthLen+headerLen || n > maxPacket {
		return header{}, nil, fmt.Errorf("libvirt packet of %d bytes", n)
	}
	buf := make([]byte, n-lengthLen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return header{}, nil, err
	}
	var w [6]uint32
	for i := range w {
		w[i] = binary.BigEndian.Uint32(buf[4*i:])
	}
	return header{w[0], w[1], w[2], w[3], w[4], w[5]}, buf[headerLen:], nil
}

// xdrWriter builds an XDR payload.
type xdrWriter struct{ bytes.Buffer }

func (x *xdrWriter) uint32(v uint32) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	x.Write(b[:])
}

func (x *xdrWriter) string(s string) {
	x.uint32(uint32(len(s)))
	x.WriteString(s)
	x.Write(make([]byte, pad(len(s))))
}

// optString is an XDR optional string (a pointer): present, then the string.
func (x *xdrWriter) optString(s string) {
	x.uint32(1)
	x.string(s)
}

func pad(n int) int { return (4 - n%4) % 4 }

// xdrReader reads an XDR payload; the first error sticks.
type xdrReader struct {
	b   []byte
	err error
}

var errShort = errors.New("libvirt reply too short")

func (x *xdrReader) uint32() uint32 {
	if x.err != nil {
		return 0
	}
	if len(x.b) < 4 {
		x.err = errShort
		return 0
	}
	v := binary.BigEndian.Uint32(x.b)
	x.b = x.b[4:]
	return v
}

func (x *xdrReader) opaque(n int) []byte {
	if x.err != nil {
		return nil
	}
	if n < 0 || len(x.b) < n+pad(n) {
		x.err = errShort
		return nil
	}
	v := x.b[:n]
	x.b = x.b[n+pad(n):]
	return v
}

func (x *xdrReader) string() string {
	n := x.uint32()
	return string(x.opaque(int(n)))
}

func (x *xdrReader) optString() (string, bool) {
	if x.uint32() == 0 {
		return "", false
	}
	return x.string(), x.err == nil
}

// remoteError decodes the message of libvirt's remote_error (code,
// domain, message, ...): what a packet with the error status carries.
func remoteError(payload []byte) error {
	x := &xdrReader{b: payload}
	code := int32(x.uint32())
	x.uint32() // the error's domain (which libvirt module)
	msg, ok := x.optString()
	if x.err != nil || !ok {
		return fmt.Errorf("libvirt error %d", code)
	}
	return fmt.Errorf("libvirt error %d: %s", code, msg)
}
