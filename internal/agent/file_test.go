package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fileAgent is an in-memory agent for the guest-file-* commands: one
// file system of files by path, handles that must all be closed.
type fileAgent struct {
	files   map[string][]byte
	open    map[int]string // handle -> path
	pos     map[int]int
	next    int
	failOn  string // a command that fails
	largest int    // the largest write, in bytes
}

func newFileAgent() *fileAgent {
	return &fileAgent{files: map[string][]byte{}, open: map[int]string{}, pos: map[int]int{}, next: 1000}
}

func (a *fileAgent) run(_ context.Context, command string) (string, error) {
	var req struct {
		Execute   string         `json:"execute"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(command), &req); err != nil {
		return "", err
	}
	if req.Execute == a.failOn {
		return `{"error":{"class":"GenericError","desc":"injected failure"}}`, nil
	}
	h := 0
	if v, ok := req.Arguments["handle"].(float64); ok {
		h = int(v)
		if _, ok := a.open[h]; !ok {
			return `{"error":{"class":"GenericError","desc":"bad handle"}}`, nil
		}
	}
	switch req.Execute {
	case "guest-file-open":
		p := req.Arguments["path"].(string)
		switch req.Arguments["mode"] {
		case "r":
			if _, ok := a.files[p]; !ok {
				return fmt.Sprintf(`{"error":{"class":"GenericError","desc":"failed to open file '%s' (mode: 'r'): No such file or directory"}}`, p), nil
			}
		case "w":
			a.files[p] = nil
		}
		a.next++
		a.open[a.next], a.pos[a.next] = p, 0
		return fmt.Sprintf(`{"return":%d}`, a.next), nil
	case "guest-file-read":
		f, n := a.files[a.open[h]], int(req.Arguments["count"].(float64))
		b := f[a.pos[h]:min(len(f), a.pos[h]+n)]
		a.pos[h] += len(b)
		return fmt.Sprintf(`{"return":{"count":%d,"buf-b64":%q,"eof":%t}}`, len(b), base64.StdEncoding.EncodeToString(b), a.pos[h] == len(f)), nil
	case "guest-file-write":
		b, _ := base64.StdEncoding.DecodeString(req.Arguments["buf-b64"].(string))
		a.largest = max(a.largest, len(b))
		a.files[a.open[h]] = append(a.files[a.open[h]], b...)
		return fmt.Sprintf(`{"return":{"count":%d,"eof":false}}`, len(b)), nil
	case "guest-file-flush":
		return `{"return":{}}`, nil
	case "guest-file-close":
		delete(a.open, h)
		return `{"return":{}}`, nil
	}
	return "", fmt.Errorf("unexpected command %s", req.Execute)
}

func TestFileCopy(t *testing.T) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*writeChunk/16+5)
	a := newFileAgent()
	if n, err := WriteFile(ctx, a.run, "/tmp/f", bytes.NewReader(data)); err != nil || n != int64(len(data)) {
		t.Fatalf("WriteFile: %d, %v", n, err)
	}
	if !bytes.Equal(a.files["/tmp/f"], data) || a.largest > writeChunk {
		t.Errorf("the guest's file: %d bytes, largest write %d; want the %d sent, writes of at most %d", len(a.files["/tmp/f"]), a.largest, len(data), writeChunk)
	}
	var back bytes.Buffer
	if n, err := ReadFile(ctx, a.run, "/tmp/f", &back); err != nil || n != int64(len(data)) || !bytes.Equal(back.Bytes(), data) {
		t.Errorf("ReadFile: %d, %v; %d bytes back", n, err, back.Len())
	}
	a.files["/empty"] = nil
	if n, err := ReadFile(ctx, a.run, "/empty", &back); err != nil || n != 0 {
		t.Errorf("ReadFile of an empty file: %d, %v", n, err)
	}
	if len(a.open) != 0 {
		t.Errorf("handles left open: %v", a.open)
	}

	// A failure names the file, and the handle is closed all the same.
	if _, err := ReadFile(ctx, a.run, "/no/such", &back); err == nil || !strings.Contains(err.Error(), "/no/such") {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
	for _, cmd := range []string{"guest-file-read", "guest-file-write", "guest-file-flush"} {
		a.failOn = cmd
		var err error
		if cmd == "guest-file-read" {
			_, err = ReadFile(ctx, a.run, "/tmp/f", &back)
		} else {
			_, err = WriteFile(ctx, a.run, "/tmp/g", bytes.NewReader(data))
		}
		if err == nil || !strings.Contains(err.Error(), cmd) || !strings.Contains(err.Error(), "injected failure") {
			t.Errorf("%s failing: %v", cmd, err)
		}
		if len(a.open) != 0 {
			t.Errorf("%s failing: handles left open: %v", cmd, a.open)
		}
	}
	a.failOn = ""
	// A reader's failure ends the copy, the handle closed.
	if _, err := WriteFile(ctx, a.run, "/tmp/h", errReader{}); err == nil || !strings.Contains(err.Error(), "source broke") || len(a.open) != 0 {
		t.Errorf("WriteFile from a failing reader: %v, open %v", err, a.open)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

// TestStatus: guest-exec-status' standard error, signal and truncation
// flags come through; bad base64 is an error.
func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  Result
		err   string
	}{
		{reply: `{"return":{"exited":false}}`, want: Result{Stdout: []byte{}, Stderr: []byte{}}},
		{reply: `{"return":{"exited":true,"exitcode":3,"out-data":"b3V0","err-data":"ZXJy","err-truncated":true}}`,
			want: Result{Exited: true, ExitCode: 3, Stdout: []byte("out"), Stderr: []byte("err"), ErrTruncated: true}},
		{reply: `{"return":{"exited":true,"signal":9}}`, want: Result{Exited: true, Signal: 9, Stdout: []byte{}, Stderr: []byte{}}},
		{reply: `{"return":{"exited":true,"err-data":"!!"}}`, err: "error output"},
	} {
		got, err := Status(context.Background(), func(context.Context, string) (string, error) { return tc.reply, nil }, 5)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error with %q", tc.reply, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.reply, got, err, tc.want)
		}
	}
}
