package virtiofsd

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// helperEnv makes the test binary the wrapper (TestMain), so a test can
// run it as another user.
const helperEnv = "VIRTIOFSD_TEST_WRAPPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		p, err := Translate(os.Args[1:], os.Getuid(), os.Getgid())
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := Run(ctx, p, CBinary, os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunUnprivileged runs QEMU 7.2's virtiofsd through the wrapper as an
// unprivileged user with a supplementary group, as a KubeVirt virtiofs
// container runs it (uid 107, fsGroup 107, no capabilities, no privilege
// escalation), with virt-controller's arguments, and speaks vhost-user to
// it: the daemon answers GET_FEATURES with the virtio 1.0 and protocol
// feature bits, ends when its front end hangs up, and the socket goes.
func TestRunUnprivileged(t *testing.T) {
	testenv.Root(t, "runs the wrapper as another user")
	testenv.Need(t, "QEMU 7.2's virtiofsd ("+CBinary+", package qemu-system-common)", statErr(CBinary))
	uid, gid, err := pod.LookupUser(launchertest.TestUser)
	testenv.Need(t, "the "+launchertest.TestUser+" user", err)

	dir, err := os.MkdirTemp("", "vfsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	shared := filepath.Join(dir, "share")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "key"), []byte("value\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sockDir := filepath.Join(dir, "sockets")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sockDir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "fs.sock")
	// The test binary's own directory is root's alone.
	self := filepath.Join(dir, "wrapper")
	copyFile(t, os.Args[0], self)

	cmd := exec.Command(self, "--socket-path="+sock, "--shared-dir="+shared,
		"--sandbox=none", "--cache=auto", "--migration-on-error=guest-error", "--migration-mode=find-paths")
	cmd.Env = []string{helperEnv + "=1"}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid), 100}},
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	conn := dialWhenUp(t, sock, done, &out)
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
		t.Errorf("socket owned by uid %d, want the daemon's user %d", st.Uid, uid)
	}
	features := getFeatures(t, conn)
	const versionOne, protocolFeatures = 1 << 32, 1 << 30
	if features&versionOne == 0 || features&protocolFeatures == 0 {
		t.Errorf("GET_FEATURES = %#x, want VIRTIO_F_VERSION_1 and VHOST_USER_F_PROTOCOL_FEATURES", features)
	}
	conn.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("wrapper: %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not end after its front end hung up\n%s", out.String())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}

// dialWhenUp connects to the daemon's socket once it accepts.
func dialWhenUp(t *testing.T, sock string, done <-chan error, out *strings.Builder) net.Conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			return conn
		}
		select {
		case werr := <-done:
			t.Fatalf("wrapper ended before its socket answered: %v\n%s", werr, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket at %s: %v\n%s", sock, err, out.String())
		}
	}
}

// getFeatures sends vhost-user's GET_FEATURES and returns the answer.
func getFeatures(t *testing.T, conn net.Conn) uint64 {
	t.Helper()
	const getFeatures, version, reply = 1, 0x1, 0x4
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	msg := binary.LittleEndian.AppendUint32(nil, getFeatures)
	msg = binary.LittleEndian.AppendUint32(msg, version)
	msg = binary.LittleEndian.AppendUint32(msg, 0)
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	ans := make([]byte, 20)
	if _, err := io.ReadFull(conn, ans); err != nil {
		t.Fatalf("GET_FEATURES reply: %v", err)
	}
	req, flags, size := binary.LittleEndian.Uint32(ans), binary.LittleEndian.Uint32(ans[4:]), binary.LittleEndian.Uint32(ans[8:])
	if req != getFeatures || flags&reply == 0 || size != 8 {
		t.Fatalf("reply header: request %d, flags %#x, size %d", req, flags, size)
	}
	return binary.LittleEndian.Uint64(ans[12:])
}
