package netsetup

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

func TestTxChecksumOff(t *testing.T) {
	testenv.Root(t, "makes a bridge in a network namespace")
	// A bridge in the current namespace would be visible to others: work in
	// a fresh unnamed namespace on a thread of our own.
	err := inFreshNS(func() error {
		// A plain bridge has it on, so the reading below means something.
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "plain"}}); err != nil {
			return err
		}
		if on, err := txChecksum("plain", false, false); err != nil || !on {
			t.Errorf("plain bridge tx checksum = %v, %v; want on", on, err)
		}
		var u undo
		br, err := ensureBridge("k6t-test", 1500, nil, &u)
		if err != nil {
			return err
		}
		defer netlink.LinkDel(br)
		on, err := txChecksum("k6t-test", false, false)
		if err != nil {
			return err
		}
		if on {
			t.Errorf("tx checksum offload still on")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// inFreshNS runs fn in a new network namespace on a locked thread that is
// discarded afterwards (it never returns to the pool in the wrong namespace).
func inFreshNS(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}
