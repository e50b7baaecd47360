package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// readChunk is how much one guest-file-read asks for: its base64 form
// stays well below the 4 MiB a libvirt RPC string may hold. writeChunk is
// what one guest-file-write carries: a 512 KiB write was seen to leave
// Debian 12's qemu-ga unresponsive to libvirt ("Guest agent not available
// for now"), 48 KiB ones copy 1.5 MB in well under a second under TCG.
const (
	readChunk  = 512 << 10
	writeChunk = 48 << 10
)

// closeTimeout bounds the guest-file-close after a copy that failed or
// was cancelled: the handle is the agent's until closed.
const closeTimeout = 5 * time.Second

// ReadFile copies the guest's file path to w through the agent
// (guest-file-open "r", guest-file-read until its end, guest-file-close)
// and returns how many bytes it copied.
func ReadFile(ctx context.Context, run Runner, path string, w io.Writer) (int64, error) {
	h, err := openFile(ctx, run, path, "r")
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		var rd struct {
			Count  int    `json:"count"`
			BufB64 string `json:"buf-b64"`
			EOF    bool   `json:"eof"`
		}
		if err := call(ctx, run, "guest-file-read", map[string]any{"handle": h, "count": readChunk}, &rd); err != nil {
			return n, closeFile(run, h, fmt.Errorf("read %s: %w", path, err))
		}
		b, err := base64.StdEncoding.DecodeString(rd.BufB64)
		if err != nil {
			return n, closeFile(run, h, fmt.Errorf("read %s: %w", path, err))
		}
		if _, err := w.Write(b); err != nil {
			return n, closeFile(run, h, fmt.Errorf("read %s: %w", path, err))
		}
		n += int64(len(b))
		if rd.EOF || len(b) == 0 {
			return n, closeFile(run, h, nil)
		}
	}
}

// WriteFile copies r into the guest's file path through the agent
// (guest-file-open "w": created, or emptied first; guest-file-write of
// each chunk; guest-file-flush and guest-file-close) and returns how many
// bytes it copied. The file's mode is what the agent gives a new file.
func WriteFile(ctx context.Context, run Runner, path string, r io.Reader) (int64, error) {
	h, err := openFile(ctx, run, path, "w")
	if err != nil {
		return 0, err
	}
	var n int64
	buf := make([]byte, writeChunk)
	for {
		m, rerr := io.ReadFull(r, buf)
		if m > 0 {
			var wr struct {
				Count int `json:"count"`
			}
			args := map[string]any{"handle": h, "buf-b64": base64.StdEncoding.EncodeToString(buf[:m])}
			if err := call(ctx, run, "guest-file-write", args, &wr); err != nil {
				return n, closeFile(run, h, fmt.Errorf("write %s: %w", path, err))
			}
			if wr.Count != m {
				return n, closeFile(run, h, fmt.Errorf("write %s: the agent wrote %d of %d bytes", path, wr.Count, m))
			}
			n += int64(m)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return n, closeFile(run, h, fmt.Errorf("write %s: %w", path, rerr))
		}
	}
	var none struct{}
	if err := call(ctx, run, "guest-file-flush", map[string]any{"handle": h}, &none); err != nil {
		return n, closeFile(run, h, fmt.Errorf("write %s: %w", path, err))
	}
	return n, closeFile(run, h, nil)
}

func openFile(ctx context.Context, run Runner, path, mode string) (int, error) {
	var h int
	if err := call(ctx, run, "guest-file-open", map[string]any{"path": path, "mode": mode}, &h); err != nil {
		return 0, fmt.Errorf("open %s in the guest: %w", path, err)
	}
	return h, nil
}

// closeFile closes the agent's handle h, on a deadline of its own (the
// copy's context may be what ended it), and returns err, or the close's
// error when err is nil.
func closeFile(run Runner, h int, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var none struct{}
	if cerr := call(ctx, run, "guest-file-close", map[string]any{"handle": h}, &none); cerr != nil && err == nil {
		return cerr
	}
	return err
}

// call runs one agent command with arguments and decodes its "return"
// into v.
func call(ctx context.Context, run Runner, command string, args map[string]any, v any) error {
	req, err := json.Marshal(map[string]any{"execute": command, "arguments": args})
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	reply, err := run(ctx, string(req))
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	return decodeReturn(command, reply, v)
}
