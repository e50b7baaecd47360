package consolehub

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestConsoleHubLimit: maxConsoles consoles attach and see the guest's
// output; one more is told why and closed, and attaches once another
// detached.
func TestConsoleHubLimit(t *testing.T) {
	guest, qemu := net.Pipe()
	defer qemu.Close()
	go io.Copy(io.Discard, qemu) // what the consoles type
	var status testenv.SyncBuffer
	sock := filepath.Join(t.TempDir(), "console.sock")
	h, err := New(guest, io.Discard, &status, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	go h.Run()
	attach := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range maxConsoles {
		held = append(held, attach())
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		h.mu.Lock()
		n := len(h.clients)
		h.mu.Unlock()
		if n == maxConsoles {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consoles attached, want %d", n, maxConsoles)
		}
		time.Sleep(10 * time.Millisecond)
	}
	over := attach()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(over)
	over.Close()
	if err != nil || !strings.Contains(string(b), "16 are, the most allowed") {
		t.Errorf("a console over the limit read %q, %v; want it told why and closed", b, err)
	}
	if !strings.Contains(status.String(), "vlctl: console socket: a console not attached") {
		t.Errorf("vlctl run did not say a console was refused: %q", status.String())
	}
	held[0].Close()
	held = held[1:]
	for deadline := time.Now().Add(5 * time.Second); ; {
		c := attach()
		qemu.Write([]byte("VL-OUTPUT\n"))
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		got, _ := io.ReadAll(c) // until the deadline
		if strings.Contains(string(got), "VL-OUTPUT") {
			held = append(held, c)
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("a console detached and still no other attaches")
		}
	}
}
