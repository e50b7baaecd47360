package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/logging"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func waitOutput(t *testing.T, out *testenv.SyncBuffer, want string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); out.String() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("output %q, want %q", out.String(), want)
		}
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestParseArgs(t *testing.T) {
	c, _, err := parseArgs([]string{"--logfile", "/x/virt-serial0-log", "--unknown", "-v=5", "--socket-timeout=1s", "-poll", "10ms"})
	if err != nil || c.logFile != "/x/virt-serial0-log" || c.verbosity != 5 || c.socketTimeout != time.Second || c.poll != 10*time.Millisecond {
		t.Errorf("parsed %+v, %v", c, err)
	}
	// By default it waits for the console socket as long as it takes: a
	// migration target's QEMU starts with the migration.
	if c, _, err := parseArgs([]string{"--logfile", "/x/virt-serial0-log"}); err != nil || c.socketTimeout != 0 {
		t.Errorf("defaults %+v, %v: want no socket timeout", c, err)
	}
	for _, bad := range [][]string{nil, {"-v", "x"}, {"--logfile"}, {"--logfile=a", "--poll=-1s"}} {
		if _, _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q): no error", bad)
		}
	}
}

// TestFollow drives the follower through the life of a console log: absent,
// growing in pieces, truncated, replaced, and ends when the socket goes.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "virt-serial0-log")
	socket := filepath.Join(dir, "virt-serial0")
	out := &testenv.SyncBuffer{}
	done := make(chan error, 1)
	c := config{logFile: logFile, socketTimeout: 5 * time.Second, poll: 5 * time.Millisecond}
	go func() { done <- run(t.Context(), logging.New(io.Discard, "t", 2), c, out) }()

	time.Sleep(30 * time.Millisecond) // nothing there yet: it must wait
	if err := os.WriteFile(socket, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	appendTo(t, logFile, "booting\n")
	waitOutput(t, out, "booting\n")
	appendTo(t, logFile, "log")
	time.Sleep(30 * time.Millisecond)
	if out.String() != "booting\n" {
		t.Fatalf("an unfinished line was printed: %q", out.String())
	}
	appendTo(t, logFile, "in: \n")
	waitOutput(t, out, "booting\nlogin: \n")

	// Truncated and rewritten (shorter than before).
	if err := os.WriteFile(logFile, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "booting\nlogin: \na\n")

	// Replaced by a new file.
	if err := os.WriteFile(logFile+".new", []byte("new file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(logFile+".new", logFile); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "booting\nlogin: \na\nnew file\n")

	appendTo(t, logFile, "last words")
	os.Remove(socket)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("virt-tail did not end when the socket went away")
	}
	if want := "booting\nlogin: \na\nnew file\nlast words\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

func TestEnds(t *testing.T) {
	cases := []struct {
		name    string
		act     func(logFile string, cancel func())
		wantErr bool
	}{
		{"socket never appears", func(string, func()) {}, true},
		{"cancelled", func(_ string, cancel func()) { cancel() }, false},
		{"term done marker", func(lf string, _ func()) { os.WriteFile(lf+"-sigTerm-done", nil, 0o644) }, false},
		{"term file removed", func(lf string, _ func()) {
			os.WriteFile(lf+"-sigTerm", nil, 0o644)
			time.Sleep(50 * time.Millisecond)
			os.Remove(lf + "-sigTerm")
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "virt-serial0-log")
			timeout := 200 * time.Millisecond
			if !c.wantErr {
				timeout = 0 // only the action may end it
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, logging.New(io.Discard, "t", 2), config{logFile: logFile, socketTimeout: timeout, poll: 5 * time.Millisecond}, io.Discard)
			}()
			time.Sleep(20 * time.Millisecond)
			c.act(logFile, cancel)
			select {
			case err := <-done:
				if (err != nil) != c.wantErr {
					t.Errorf("err = %v, want error %v", err, c.wantErr)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("did not end")
			}
		})
	}
}

// TestBinary runs the real binary and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	testenv.Slow(t, "a go build of the binary")
	bin := filepath.Join(t.TempDir(), "virt-tail")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := exec.Command(bin).Run(); err == nil {
		t.Error("virt-tail without --logfile succeeded")
	}
	dir := t.TempDir()
	logFile := filepath.Join(dir, "virt-serial0-log")
	os.WriteFile(filepath.Join(dir, "virt-serial0"), nil, 0o644)
	appendTo(t, logFile, "hello console\n")
	cmd := exec.Command(bin, "--logfile", logFile, "--unknown-flag")
	out := &testenv.SyncBuffer{}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, out, "hello console\n")
	appendTo(t, logFile, "more\n")
	waitOutput(t, out, "hello console\nmore\n")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("exit %d after SIGTERM; stderr %s", ee.ExitCode(), errb.String())
		} else {
			t.Error(err)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		if l != "" && !strings.HasPrefix(l, "{") {
			t.Errorf("stderr line is not a JSON log line: %q", l)
		}
	}
}
