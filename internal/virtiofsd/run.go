package virtiofsd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CBinary is QEMU 7.2's virtiofsd where Debian 12 installs it.
const CBinary = "/usr/lib/qemu/virtiofsd"

// stopGrace is how long the daemon has to end after SIGTERM before it is
// killed.
const stopGrace = 5 * time.Second

// Run carries out p with the C daemon at binary. An informational plan
// (--print-capabilities, --version, --help) just runs it. Otherwise Run
// listens on p.SocketPath itself (the C daemon would first write a lock
// file under /var/run/virtiofsd, which an unprivileged container cannot)
// and starts the daemon on that socket (--fd=3) in a user namespace of its
// own where the caller's uid and gid are root: its sandbox (chroot) and its
// capability set-up need capabilities, which an unprivileged container has
// only there. The daemon gets an empty environment. Cancelling ctx stops
// it (SIGTERM, SIGKILL after stopGrace); Run removes the socket it made
// and returns the daemon's exit error.
func Run(ctx context.Context, p *Plan, binary string, stdout, stderr io.Writer) error {
	cmd := exec.Command(binary, p.Args...)
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if p.Info {
		return cmd.Run()
	}
	if err := fakeSetgroups(); err != nil {
		return err
	}
	sock, err := listen(p.SocketPath)
	if err != nil {
		return err
	}
	defer sock.Close()
	var made unix.Stat_t // the bound path's inode (a socket's fstat is sockfs')
	if err := unix.Lstat(p.SocketPath, &made); err != nil {
		return fmt.Errorf("--socket-path %s: %w", p.SocketPath, err)
	}
	defer removeSocket(p.SocketPath, made)
	cmd.Args = append(cmd.Args, "--fd=3")
	cmd.ExtraFiles = []*os.File{sock}
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s in a user namespace of its own (unprivileged user namespaces must be allowed): %w", binary, err)
	}
	sock.Close() // the daemon holds it now
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(stopGrace):
		_ = cmd.Process.Kill()
		return <-done
	}
}

// listen makes the vhost-user listening socket at path. A socket left
// there (a daemon that died) is replaced, as the Rust daemon does; any
// other file is refused.
func listen(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("--socket-path %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--socket-path %s: remove the old socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--socket-path %s: %w", path, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("--socket-path %s: socket: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("--socket-path %s: bind: %w", path, err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		os.Remove(path)
		return nil, fmt.Errorf("--socket-path %s: listen: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// removeSocket removes path if it is still the socket Run bound (made),
// not one a later daemon made there.
func removeSocket(path string, made unix.Stat_t) {
	var now unix.Stat_t
	if unix.Lstat(path, &now) != nil {
		return
	}
	if made.Dev == now.Dev && made.Ino == now.Ino {
		os.Remove(path)
	}
}

// fakeSetgroups makes setgroups(0, NULL) succeed without effect for this
// process and its children. The C daemon's first act is to drop its
// supplementary groups, and it exits when it cannot; in a user namespace
// that an unprivileged process made, setgroups is always refused (that is
// the price of mapping one's own gid without CAP_SETGID), and a pod's
// container has supplementary groups (its fsGroup), which it cannot drop
// either. The daemon then keeps the groups it was given, as the Rust
// daemon KubeVirt runs keeps them with --sandbox=none. The filter allows
// every other call; the daemon's own seccomp filter comes on top.
func fakeSetgroups() error {
	groups, err := unix.Getgroups()
	if err != nil {
		return fmt.Errorf("getgroups: %w", err)
	}
	if len(groups) == 0 {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs for the setgroups filter: %w", err)
	}
	prog, err := setgroupsFilter()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp filter for setgroups: %w", errno)
	}
	return nil
}

// setgroupsFilter: on this architecture, setgroups with a size of 0
// returns 0 without running; everything else runs.
func setgroupsFilter() ([]unix.SockFilter, error) {
	var auditArch uint32
	switch runtime.GOARCH {
	case "amd64":
		auditArch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		auditArch = unix.AUDIT_ARCH_AARCH64
	default:
		return nil, fmt.Errorf("the setgroups filter does not know %s", runtime.GOARCH)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
		// struct seccomp_data: nr, arch, instruction_pointer, args[6].
		offNr   = 0
		offArch = 4
		offArg0 = 16 // low half on little-endian machines
	)
	return []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, K: auditArch, Jt: 0, Jf: 5},
		{Code: ld, K: offNr},
		{Code: jeq, K: unix.SYS_SETGROUPS, Jt: 0, Jf: 3},
		{Code: ld, K: offArg0},
		{Code: jeq, K: 0, Jt: 0, Jf: 1},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO}, // errno 0: success
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
	}, nil
}
