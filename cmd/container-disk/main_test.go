package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func TestParse(t *testing.T) {
	cases := []struct {
		args    []string
		path    string
		noOp    bool
		wantErr bool
	}{
		{args: []string{"--copy-path", "/a/disk_0"}, path: "/a/disk_0"},
		{args: []string{"--copy-path=/a/disk_1"}, path: "/a/disk_1"},
		{args: []string{"-c", "/a/disk_2"}, path: "/a/disk_2"},
		{args: []string{"-c/a/disk_3"}, path: "/a/disk_3"},
		{args: []string{"--no-op"}, noOp: true},
		{args: []string{"-n"}, noOp: true},
		{args: []string{"--copy-path"}, wantErr: true},
		{args: []string{"--bogus"}, wantErr: true},
		{args: []string{"stray"}, wantErr: true},
	}
	for _, c := range cases {
		p, noOp, _, err := parse(c.args)
		if (err != nil) != c.wantErr || p != c.path || noOp != c.noOp {
			t.Errorf("parse(%q) = %q, %v, %v; want %q, %v, err=%v", c.args, p, noOp, err, c.path, c.noOp, c.wantErr)
		}
	}
}

func TestRunExitsEarly(t *testing.T) {
	cases := []struct {
		args []string
		want int
	}{
		{[]string{"--no-op"}, 0},
		{[]string{"--help"}, 0},
		{nil, 1},
		{[]string{"--copy-path", "/" + strings.Repeat("x", 102)}, 1},
		{[]string{"--unknown"}, 1},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if got := run(c.args, nil, time.Second, &out, &errb); got != c.want {
			t.Errorf("run(%q) = %d, want %d (stderr %s)", c.args, got, c.want, errb.String())
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met within 5 s")
		}
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestSocketLifecycle(t *testing.T) {
	cases := []struct {
		name string
		end  func(sock string, sigs chan os.Signal)
	}{
		{"socket removed", func(sock string, _ chan os.Signal) { os.Remove(sock) }},
		{"SIGTERM", func(_ string, sigs chan os.Signal) { sigs <- syscall.SIGTERM }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			copyPath := filepath.Join(t.TempDir(), "new-dir", "disk_0")
			sock := copyPath + ".sock"
			sigs := make(chan os.Signal, 1)
			done := make(chan int, 1)
			var errb bytes.Buffer
			go func() { done <- run([]string{"--copy-path", copyPath}, sigs, 20*time.Millisecond, &errb, &errb) }()
			// The file appears at bind(2), a moment before listen(2).
			waitFor(t, func() bool {
				conn, err := net.Dial("unix", sock)
				if err == nil {
					conn.Close()
				}
				return err == nil
			})
			// virt-handler connects to find the container; many times over.
			for range 100 {
				conn, err := net.Dial("unix", sock)
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				conn.Close()
			}
			c.end(sock, sigs)
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("exit %d; stderr %s", code, errb.String())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("container-disk did not exit")
			}
			if exists(sock) {
				t.Error("socket still exists after exit")
			}
		})
	}
}

// TestBinary runs the real static binary as the pod does and stops it the
// way the kubelet does.
func TestBinary(t *testing.T) {
	testenv.Slow(t, "a go build of the binary")
	bin := filepath.Join(t.TempDir(), "container-disk")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	copyPath := filepath.Join(t.TempDir(), "disk_3")
	cmd := exec.Command(bin, "--copy-path", copyPath)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return exists(copyPath + ".sock") })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v; stderr %s", err, errb.String())
	}
	if exists(copyPath + ".sock") {
		t.Error("socket left behind")
	}
}
