package standalone

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPeerBelow: a socket this process listens on is accepted for a run
// whose monitor is this process (or an ancestor of it), and refused for a
// run whose monitor is another process (a child that is not its listener's
// ancestor).
func TestPeerBelow(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, pid := range []int{os.Getpid(), os.Getppid()} {
		if err := peerBelow(pid)(dial()); err != nil {
			t.Errorf("monitor pid %d: %v, want accepted", pid, err)
		}
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	err = peerBelow(other.Process.Pid)(dial())
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("monitor pid %d (not the listener's ancestor): %v, want refused", other.Process.Pid, err)
	}
}
