package relay

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestRelayAfterEMFILE: a relay whose process ran out of file descriptors
// (accept fails with EMFILE while the peers' connections wait in the
// backlog) serves again once descriptors come free, and says what
// happened. The relay runs in a child (this test binary again) whose
// RLIMIT_NOFILE leaves room for three connections, so the test's own
// descriptors stay untouched.
func TestRelayAfterEMFILE(t *testing.T) {
	if os.Getenv("VL_RELAY_EMFILE_CHILD") == "1" {
		emfileChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayAfterEMFILE$", "-test.count=1")
	cmd.Env = append(os.Environ(), "VL_RELAY_EMFILE_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the child ends
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	lines := bufio.NewScanner(stdout)
	var addr string
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "ADDR "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatalf("the child did not listen: %s", stderr.String())
	}
	go io.Copy(io.Discard, stdout)

	// Connections until one is not served: the child is out of
	// descriptors and that one waits in the backlog.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var waiting net.Conn
	for i := 0; i < 10 && waiting == nil; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := ping(c, i, time.Second); err != nil {
			waiting = c
			break
		}
		held = append(held, c)
	}
	if waiting == nil {
		t.Fatalf("ten connections served: the child never ran out of descriptors")
	}
	defer waiting.Close()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(stderr.String(), "too many open files"); {
		if time.Now().After(deadline) {
			t.Fatalf("the child did not report EMFILE:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A descriptor comes free: the waiting connection is served.
	held[0].Close()
	held = held[1:]
	if err := readEcho(waiting, 99, 5*time.Second); err != nil {
		t.Fatalf("after a descriptor came free, the waiting connection was not served: %v\nchild:\n%s", err, stderr.String())
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, c)
	// The child is full again (two held, the one served): c waits
	// until another comes free.
	held[0].Close()
	held = held[1:]
	if err := ping(c, 7, 5*time.Second); err != nil {
		t.Errorf("a new connection after EMFILE: %v", err)
	}
}

// ping sends a line naming i on c and waits for its echo; the waiting
// connection's line was sent by then (readEcho).
func ping(c net.Conn, i int, wait time.Duration) error {
	if _, err := fmt.Fprintf(c, "ping %d\n", i); err != nil {
		return err
	}
	return readEcho(c, i, wait)
}

// readEcho waits for the echo of a ping (any index when i is 99).
func readEcho(c net.Conn, i int, wait time.Duration) error {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if i != 99 && line != fmt.Sprintf("ping %d\n", i) {
		return fmt.Errorf("echo %q", line)
	}
	return nil
}

// emfileChild serves a relay to an echo (over net.Pipe: no descriptor)
// with room for three more descriptors, until stdin ends.
func emfileChild(t *testing.T) {
	r := New(func(what string, err error) { fmt.Fprintf(os.Stderr, "%s: %v\n", what, err) })
	defer r.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lim := syscall.Rlimit{}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(fds) - 1 + 3) // less the one ReadDir used
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	r.Serve(l, "echo", func(net.Conn) (net.Conn, error) {
		near, far := net.Pipe()
		go func() {
			defer far.Close()
			line, err := bufio.NewReader(far).ReadString('\n')
			if err == nil {
				io.WriteString(far, line)
			}
		}()
		return near, nil
	})
	fmt.Printf("ADDR %s\n", l.Addr())
	io.Copy(io.Discard, os.Stdin)
}
