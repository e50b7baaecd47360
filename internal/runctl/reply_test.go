package runctl

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestReplyDropsExtraDescriptors: an answer that comes with more
// descriptors than the published ports it names stands (a completed
// migration's must), and none of them is kept.
func TestReplyDropsExtraDescriptors(t *testing.T) {
	socket := func(at netip.AddrPort) *os.File {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(at.Port()), Addr: at.Addr().As4()}); err != nil {
			t.Fatal(err)
		}
		if err := unix.Listen(fd, 8); err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fd), "test socket")
	}
	a, b := testenv.UnixPair(t)
	l1, l2 := socket(testenv.FreeAddr(t)), socket(testenv.FreeAddr(t))
	defer l1.Close()
	defer l2.Close()
	msg := `{"message":"done","ports":["x","y"]}` + "\n"
	if _, _, err := a.WriteMsgUnix([]byte(msg), unix.UnixRights(int(l1.Fd()), int(l2.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	rep, err := ReadReply(b, 1)
	if err != nil || rep.Message != "done" || rep.Files != nil || rep.Ports != nil || rep.Dropped == nil || !strings.Contains(rep.Dropped.Error(), "more descriptors") {
		t.Errorf("two sockets for one published port: %+v, %d files, dropped: %v, %v; want the answer, no socket kept", rep.Reply, len(rep.Files), rep.Dropped, err)
	}
	if n := extraCopies(t, l1, l2); n != 0 {
		t.Errorf("%d of the sockets received left open", n)
	}
}

// extraCopies counts this process's descriptors of the sockets files
// other than files' own.
func extraCopies(t *testing.T, files ...*os.File) int {
	t.Helper()
	want := map[string]bool{}
	own := map[string]bool{}
	for _, f := range files {
		fd := strconv.Itoa(int(f.Fd()))
		own[fd] = true
		l, err := os.Readlink("/proc/self/fd/" + fd)
		if err != nil {
			t.Fatal(err)
		}
		want[l] = true
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && want[l] && !own[e.Name()] {
			n++
		}
	}
	return n
}
