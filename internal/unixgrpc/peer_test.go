package unixgrpc_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// TestPeerBelow: a socket this process listens on is accepted for this
// process and its ancestors, with its pid, and refused, naming whose
// processes it is not one of, for a process that is not its ancestor.
func TestPeerBelow(t *testing.T) {
	dial := launchertest.Listening(t)
	for _, pid := range []int{os.Getpid(), os.Getppid()} {
		if peer, err := unixgrpc.PeerBelow(dial(), pid, "the test"); err != nil || peer != os.Getpid() {
			t.Errorf("below pid %d: peer %d, %v; want %d accepted", pid, peer, err, os.Getpid())
		}
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	_, err := unixgrpc.PeerBelow(dial(), other.Process.Pid, "the other run")
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "not a process of the other run") {
		t.Errorf("below pid %d (not the listener's ancestor): %v, want refused", other.Process.Pid, err)
	}
}
