package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// fileGuest is an in-memory guest for the file-based key fallback: a
// passwd database, files with owner and mode, and the agent's guest-exec
// (getent, chown, chmod, answered at the first status poll) and
// guest-file-* commands with qemu-ga's error texts. The real agent runs
// this path in test/conformance (TestAccessCredentials, with the agent's
// key commands blocked).
type fileGuest struct {
	passwd  map[string]string // user -> passwd line
	files   map[string]*guestFile
	dirs    map[string]bool
	handles map[int64]string // open handle -> path
	next    int64
	pending map[int]string // pid -> output once exited ("" ok), or "!N" exit code N
	pid     int
	log     []string // commands and execs, in order
	failOn  string   // a command (or exec'd program) that fails
}

type guestFile struct {
	data, owner, mode string
}

func (g *fileGuest) run(_ context.Context, command string) (string, error) {
	var req struct {
		Execute   string         `json:"execute"`
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(command), &req); err != nil {
		return "", fmt.Errorf("agent got bad JSON %q: %w", command, err)
	}
	if req.Execute == g.failOn {
		return "", fmt.Errorf("internal error: unable to execute QEMU agent command '%s'", req.Execute)
	}
	agentErr := func(desc string) (string, error) {
		return "", fmt.Errorf("internal error: unable to execute QEMU agent command '%s': %s", req.Execute, desc)
	}
	handle := func() (int64, string, bool) {
		h := int64(req.Arguments["handle"].(float64))
		p, ok := g.handles[h]
		return h, p, ok
	}
	switch req.Execute {
	case "guest-exec":
		var args []string
		for _, a := range req.Arguments["arg"].([]any) {
			args = append(args, a.(string))
		}
		prog := req.Arguments["path"].(string)
		g.log = append(g.log, prog+" "+strings.Join(args, " "))
		g.pid++
		out := ""
		switch {
		case prog == g.failOn:
			out = "!1"
		case prog == "getent" && len(args) == 2 && args[0] == "passwd":
			line, ok := g.passwd[args[1]]
			if !ok {
				out = "!2"
			} else {
				out = line + "\n"
			}
		case prog == "chown" && len(args) == 2:
			f, ok := g.files[args[1]]
			if !ok {
				out = "!1"
			} else {
				f.owner = args[0]
			}
		case prog == "chmod" && len(args) == 2:
			f, ok := g.files[args[1]]
			if !ok {
				out = "!1"
			} else {
				f.mode = args[0]
			}
		default:
			out = "!127"
		}
		g.pending[g.pid] = out
		return fmt.Sprintf(`{"return":{"pid":%d}}`, g.pid), nil
	case "guest-exec-status":
		out := g.pending[int(req.Arguments["pid"].(float64))]
		if code, ok := strings.CutPrefix(out, "!"); ok {
			return fmt.Sprintf(`{"return":{"exited":true,"exitcode":%s}}`, code), nil
		}
		return fmt.Sprintf(`{"return":{"exited":true,"exitcode":0,"out-data":%q}}`, base64.StdEncoding.EncodeToString([]byte(out))), nil
	case "guest-file-open":
		path, mode := req.Arguments["path"].(string), req.Arguments["mode"].(string)
		g.log = append(g.log, "open "+mode+" "+path)
		dir := path[:strings.LastIndex(path, "/")]
		f, ok := g.files[path]
		switch {
		case !g.dirs[dir] || (!ok && mode == "r"):
			return agentErr(fmt.Sprintf("failed to open file '%s' (mode: '%s'): No such file or directory", path, mode))
		case mode == "w" && !ok:
			// A new file: the agent runs as root.
			g.files[path] = &guestFile{owner: "0:0", mode: "644"}
		case mode == "w":
			f.data = ""
		}
		g.next++
		g.handles[g.next] = path
		return fmt.Sprintf(`{"return":%d}`, g.next), nil
	case "guest-file-read":
		_, path, ok := handle()
		if !ok {
			return agentErr("invalid handle")
		}
		d := g.files[path].data
		return fmt.Sprintf(`{"return":{"count":%d,"buf-b64":%q,"eof":true}}`, len(d), base64.StdEncoding.EncodeToString([]byte(d))), nil
	case "guest-file-write":
		_, path, ok := handle()
		if !ok {
			return agentErr("invalid handle")
		}
		data, err := base64.StdEncoding.DecodeString(req.Arguments["buf-b64"].(string))
		if err != nil {
			return agentErr(err.Error())
		}
		g.log = append(g.log, "write "+path)
		g.files[path].data += string(data)
		return fmt.Sprintf(`{"return":{"count":%d,"eof":false}}`, len(data)), nil
	case "guest-file-close":
		h, _, ok := handle()
		if !ok {
			return agentErr("invalid handle")
		}
		delete(g.handles, h)
		return `{"return":{}}`, nil
	}
	return "", fmt.Errorf("unexpected command %s", req.Execute)
}

func newFileGuest() *fileGuest {
	return &fileGuest{
		passwd:  map[string]string{"alice": "alice:x:1000:1001:Alice:/home/alice:/bin/sh"},
		files:   map[string]*guestFile{},
		dirs:    map[string]bool{"/home/alice/.ssh": true},
		handles: map[int64]string{},
		pending: map[int]string{},
	}
}

func TestWriteAuthorizedKeysFile(t *testing.T) {
	const path = "/home/alice/.ssh/authorized_keys"
	keys := []string{"ssh-ed25519 AAAA1 one", "ssh-ed25519 AAAA2 two"}
	want := "ssh-ed25519 AAAA1 one\nssh-ed25519 AAAA2 two"
	for _, tc := range []struct {
		name    string
		user    string
		prepare func(g *fileGuest)
		wantErr string // "" none
		// The file afterwards (nil: none), and the writes seen.
		want       *guestFile
		wantWrites int
	}{
		{name: "new file: written, then owned by the user with mode 600", user: "alice",
			want: &guestFile{data: want, owner: "1000:1001", mode: "600"}, wantWrites: 1},
		{name: "other keys: made writable first, then rewritten", user: "alice",
			prepare: func(g *fileGuest) {
				g.files[path] = &guestFile{data: "ssh-rsa OLD old", owner: "0:0", mode: "400"}
			},
			want: &guestFile{data: want, owner: "1000:1001", mode: "600"}, wantWrites: 1},
		{name: "the same keys: nothing written", user: "alice",
			prepare: func(g *fileGuest) {
				g.files[path] = &guestFile{data: want, owner: "5:5", mode: "644"}
			},
			want: &guestFile{data: want, owner: "5:5", mode: "644"}},
		{name: "unknown user", user: "bob", wantErr: "unable to detect home directory of user bob"},
		{name: "no ~/.ssh: not created (KubeVirt does not either)", user: "alice",
			prepare: func(g *fileGuest) { delete(g.dirs, "/home/alice/.ssh") },
			wantErr: "No such file or directory"},
		{name: "open fails otherwise", user: "alice",
			prepare: func(g *fileGuest) { g.failOn = "guest-file-open" },
			wantErr: "guest-file-open"},
		{name: "write fails: the handle is closed all the same", user: "alice",
			prepare: func(g *fileGuest) { g.failOn = "guest-file-write" },
			wantErr: "guest-file-write", want: &guestFile{owner: "0:0", mode: "644"}},
		{name: "chown fails", user: "alice",
			prepare: func(g *fileGuest) { g.failOn = "chown" },
			wantErr: "chown 1000:1001 " + path, want: &guestFile{data: want, owner: "0:0", mode: "644"}, wantWrites: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFileGuest()
			if tc.prepare != nil {
				tc.prepare(g)
			}
			err := WriteAuthorizedKeysFile(context.Background(), g.run, tc.user, keys)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			f := g.files[path]
			switch {
			case tc.want == nil && f != nil:
				t.Errorf("file %+v, want none", *f)
			case tc.want != nil && (f == nil || *f != *tc.want):
				t.Errorf("file %+v, want %+v", f, *tc.want)
			}
			writes := 0
			for _, l := range g.log {
				if strings.HasPrefix(l, "write ") {
					writes++
				}
			}
			if writes != tc.wantWrites {
				t.Errorf("%d writes, want %d; log %q", writes, tc.wantWrites, g.log)
			}
			if len(g.handles) != 0 {
				t.Errorf("handles left open: %v", g.handles)
			}
		})
	}
}
