package migrationproxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// echo serves a unix socket that answers each line with "re: line", and
// after the client's end of input sends "bye".
func echo(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					io.WriteString(c, "re: "+sc.Text()+"\n")
				}
				io.WriteString(c, "bye\n")
			}()
		}
	}()
}

// TestStream: bytes go both ways through unix → TCP → unix; the source's
// half-close reaches the target, whose last words still come back; the
// source socket is the pod user's; Close ends it all and removes it.
func TestStream(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.sock")
	echo(t, target)
	s, err := Open(filepath.Join(dir, "source.sock"), target, os.Getuid(), os.Getgid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(s.Source)
	if err != nil || st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("source socket: %v, %v; want a socket, mode 0660", st.Mode(), err)
	}
	c, err := net.Dial("unix", s.Source)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "one\ntwo\n")
	c.(*net.UnixConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "re: one\nre: two\nbye\n" {
		t.Errorf("through the stream: %q, %v", got, err)
	}
	// A connection left open is ended by Close.
	c2, err := net.Dial("unix", s.Source)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	io.WriteString(c2, "x\n")
	if line, err := bufio.NewReader(c2).ReadString('\n'); err != nil || line != "re: x\n" {
		t.Fatalf("second connection: %q, %v", line, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Errorf("a connection outlived Close")
	}
	if _, err := os.Stat(s.Source); !os.IsNotExist(err) {
		t.Errorf("source socket left after Close: %v", err)
	}
}

// TestStreamTargetMissing: a source connection whose target cannot be
// reached is closed (the source's libvirt sees the failure), and the
// stream keeps serving.
func TestStreamTargetMissing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "later.sock")
	s, err := Open(filepath.Join(dir, "source.sock"), target, os.Getuid(), os.Getgid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("unix", s.Source)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read with no target: %v, want EOF", err)
	}
	c.Close()
	echo(t, target) // the target's socket appears, as QEMU's does
	c, err = net.Dial("unix", s.Source)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "hi\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "re: hi\n" {
		t.Errorf("once the target serves: %q, %v", line, err)
	}
}
