package screenshot

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestImageMIME(t *testing.T) {
	for in, want := range map[string]string{
		"P6\n720 400\n255\n\x00": "image/x-portable-pixmap",
		"\x89PNG\r\n\x1a\n\x00":  "image/png",
		"GIF89a":                 "",
		"":                       "",
	} {
		got, err := imageMIME([]byte(in))
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}

// fakeDaemon answers the calls a screenshot makes on a unix socket, and
// then sends the screenshot's packets the way send says.
type fakeDaemon struct {
	path string
	send func(w io.Writer, serial uint32)
}

func startFake(t *testing.T, send func(w io.Writer, serial uint32)) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{path: filepath.Join(t.TempDir(), "libvirt-sock"), send: send}
	l, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeDaemon) serve(c net.Conn) {
	defer c.Close()
	for {
		h, _, err := readPacket(c)
		if err != nil {
			return
		}
		reply := header{Program: remoteProgram, Version: remoteVersion, Procedure: h.Procedure, Type: typeReply, Serial: h.Serial}
		var x xdrWriter
		switch h.Procedure {
		case procAuthList:
			x.uint32(1)
			x.uint32(authNone)
		case procLookupName:
			x.string("default_vm")
			x.Write(make([]byte, 16))
			x.uint32(1)
		case procScreenshot:
			f.send(c, h.Serial)
			continue
		}
		writePacket(c, reply, x.Bytes())
	}
}

func streamPacket(w io.Writer, serial, status uint32, data []byte) {
	writePacket(w, header{Program: remoteProgram, Version: remoteVersion, Procedure: procScreenshot, Type: typeStream, Serial: serial, Status: status}, data)
}

func replyPacket(w io.Writer, serial uint32, mime string) {
	var x xdrWriter
	x.optString(mime)
	writePacket(w, header{Program: remoteProgram, Version: remoteVersion, Procedure: procScreenshot, Type: typeReply, Serial: serial}, x.Bytes())
}

func errorPacket(w io.Writer, typ, serial uint32, msg string) {
	var x xdrWriter
	x.uint32(38) // VIR_ERR_OPERATION_FAILED
	x.uint32(10) // VIR_FROM_QEMU
	x.optString(msg)
	writePacket(w, header{Program: remoteProgram, Version: remoteVersion, Procedure: procScreenshot, Type: typ, Serial: serial, Status: statusErr}, x.Bytes())
}

const png = "\x89PNG\r\n\x1a\n"

func TestTake(t *testing.T) {
	for _, tt := range []struct {
		name     string
		send     func(w io.Writer, serial uint32)
		limit    int
		wantData string
		wantErr  string
	}{{
		name: "the reply comes first, then the data and the end",
		send: func(w io.Writer, s uint32) {
			replyPacket(w, s, "image/png")
			streamPacket(w, s, statusCont, []byte(png+"one"))
			streamPacket(w, s, statusCont, []byte("two"))
			streamPacket(w, s, statusCont, nil)
		},
		wantData: png + "onetwo",
	}, {
		name: "data comes before the reply and keeps its order",
		send: func(w io.Writer, s uint32) {
			streamPacket(w, s, statusCont, []byte(png+"one"))
			replyPacket(w, s, "image/png")
			streamPacket(w, s, statusCont, []byte("two"))
			streamPacket(w, s, statusCont, nil)
		},
		wantData: png + "onetwo",
	}, {
		name: "the end of the stream comes before the reply",
		send: func(w io.Writer, s uint32) {
			streamPacket(w, s, statusCont, []byte(png))
			streamPacket(w, s, statusCont, nil)
			replyPacket(w, s, "image/png")
		},
		wantData: png,
	}, {
		name: "a failed call is an error with libvirt's message",
		send: func(w io.Writer, s uint32) {
			errorPacket(w, typeReply, s, "screendump failed")
		},
		wantErr: "screendump failed",
	}, {
		name: "a stream that fails midway is an error",
		send: func(w io.Writer, s uint32) {
			replyPacket(w, s, "image/png")
			streamPacket(w, s, statusCont, []byte(png))
			errorPacket(w, typeStream, s, "read error")
		},
		wantErr: "read error",
	}, {
		name: "an image over the limit is refused",
		send: func(w io.Writer, s uint32) {
			replyPacket(w, s, "image/png")
			streamPacket(w, s, statusCont, []byte(png+strings.Repeat("x", 100)))
			streamPacket(w, s, statusCont, nil)
		},
		limit:   64,
		wantErr: "larger than 64 bytes",
	}, {
		name: "a stream without data is an error, never an empty image",
		send: func(w io.Writer, s uint32) {
			replyPacket(w, s, "image/png")
			streamPacket(w, s, statusCont, nil)
		},
		wantErr: "no image",
	}, {
		name: "a stream that never ends ends with the deadline",
		send: func(w io.Writer, s uint32) {
			replyPacket(w, s, "image/png")
			streamPacket(w, s, statusCont, []byte(png))
		},
		wantErr: "deadline exceeded",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, tt.send)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			limit := tt.limit
			if limit == 0 {
				limit = 1 << 20
			}
			t0 := time.Now()
			mime, data, err := Take(ctx, Request{Socket: f.path, URI: "qemu:///session", Domain: "default_vm", Limit: limit})
			if took := time.Since(t0); took > 3*time.Second {
				t.Errorf("took %v", took)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if mime != "image/png" || string(data) != tt.wantData {
				t.Errorf("got %q %q, want image/png %q", mime, data, tt.wantData)
			}
		})
	}
}

func TestTakeNeedsDeadline(t *testing.T) {
	if _, _, err := Take(context.Background(), Request{Socket: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "no deadline") {
		t.Errorf("err %v", err)
	}
}
