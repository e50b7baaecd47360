package standalone_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// openPTY opens a pseudo-terminal pair: the controller (the test's end)
// and the terminal vlctl gets as its stdin.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestVlctlRunTerminal: on a terminal, vlctl run types what the user types
// into the guest; ^] detaches the keys (the terminal back to normal, so
// that Ctrl-C, as the terminal's interrupt, stops the VM gracefully).
func TestVlctlRunTerminal(t *testing.T) {
	needRoot(t)
	t.Parallel()
	file := testGuestManifest(t, "tty", "--no-network")
	root := workRoot(t)
	ptm, stdout, errOut, exited := runOnPTY(t, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
	waitFor(t, "the guest's shell", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerReady)
	})
	if !strings.Contains(errOut.String(), "^] detaches them") {
		t.Errorf("vlctl run did not say how to detach:\n%s", errOut.String())
	}
	ptm.WriteString("\recho VL-TTY-$((6*7))\r")
	waitFor(t, "the typed command's answer", time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), "VL-TTY-42")
	})
	ptm.Write([]byte{0x1d}) // ^]
	waitFor(t, "the detach notice", time.Minute, exited, func() bool {
		return strings.Contains(errOut.String(), "keys detached from the guest")
	})
	ptm.WriteString("echo VL-AFTER-$((6*7))\r")
	time.Sleep(2 * time.Second)
	ptm.Write([]byte{0x03}) // Ctrl-C, now the terminal's interrupt
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("vlctl run after ^] and Ctrl-C: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("vlctl run did not end after ^] and Ctrl-C")
	}
	if strings.Contains(stdout.String(), "VL-AFTER-42") {
		t.Error("keys typed after ^] reached the guest")
	}
	if !strings.Contains(errOut.String(), "shutting the guest down") {
		t.Errorf("Ctrl-C after ^] did not stop the VM gracefully:\n%s", errOut.String())
	}
	checkNothingLeft(t, root)
}
