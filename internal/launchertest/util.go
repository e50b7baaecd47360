package launchertest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Must fails t on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Eventually calls try every period until it reports done, and fails t
// when timeout has passed first, saying what was awaited and what the last
// try saw.
func Eventually(t testing.TB, what string, timeout, period time.Duration, try func() (done bool, saw any)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, saw := try()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %+v", what, timeout, saw)
		}
		time.Sleep(period)
	}
}

// CopyFile copies src to dst (mode 0644).
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SHA256File is the hex SHA-256 of the file at path.
func SHA256File(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	Must(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	Must(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// Tail is the last n bytes of s, marked when cut.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// Listening is a unix socket this process listens on, accepting every
// connection and holding it until the test ends: the socket whose
// listener's credentials (SO_PEERCRED) a peer check reads. Dial connects
// to it, closed at the test's end.
func Listening(t testing.TB) (dial func() net.Conn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	Must(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return func() net.Conn {
		t.Helper()
		c, err := net.Dial("unix", sock)
		Must(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
}
