// Command container-disk runs in each containerDisk container of a KubeVirt
// launcher pod (kubevirt-wire.md 5.1). virt-controller copies it out of the
// launcher image into the pod and runs it in the disk image's container:
//
//	container-disk --no-op                      init container: exit 0 at once
//	container-disk --copy-path <dir>/disk_<N>   listen on <dir>/disk_<N>.sock
//
// The socket lets virt-handler find the container (it connects and reads the
// peer's credentials to locate its root file system, from which it
// bind-mounts the disk). Connections are accepted and closed at once so the
// backlog never fills. It exits 0 on SIGTERM or SIGINT (removing the socket)
// and when the socket file disappears, which is how virt-launcher-monitor
// ends these containers when the VM is gone; it checks for that every second.
//
// It is built static (CGO_ENABLED=0) because disk images are FROM scratch.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// maxCopyPath keeps <copy-path>.sock within sun_path's 108 bytes.
const maxCopyPath = 102

const usage = `Usage: container-disk [--copy-path PATH | --no-op]

  -c, --copy-path PATH   listen on PATH.sock until it is removed or SIGTERM
                         (PATH at most 102 bytes; its directory is created)
  -n, --no-op            exit 0 at once (the init container's run)
  -h, --help             this text
`

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], sigs, time.Second, os.Stdout, os.Stderr))
}

// run is the whole program; poll is how often the socket file is checked.
func run(args []string, sigs <-chan os.Signal, poll time.Duration, stdout, stderr io.Writer) int {
	copyPath, noOp, help, err := parse(args)
	switch {
	case err != nil:
		logf(stderr, "error", "%v", err)
		fmt.Fprint(stderr, usage)
		return 1
	case help:
		fmt.Fprint(stdout, usage)
		return 0
	case noOp:
		return 0
	case copyPath == "":
		logf(stderr, "error", "--copy-path is required")
		return 1
	case len(copyPath) > maxCopyPath:
		logf(stderr, "error", "copy path can not be longer than %d characters", maxCopyPath)
		return 1
	}

	if err := os.MkdirAll(filepath.Dir(copyPath), 0o777); err != nil {
		logf(stderr, "error", "failed to create disk directory: %v", err)
		return 1
	}
	sock := copyPath + ".sock"
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		logf(stderr, "error", "failed to listen on %s: %v", sock, err)
		return 1
	}
	// On SIGTERM we unlink the socket ourselves (Close does); when someone
	// else removed it, there is nothing left to unlink.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			c.Close()
		}
	}()

	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-sigs:
			l.Close() // unlinks the socket file
			return 0
		case <-tick.C:
			if _, err := os.Lstat(sock); errors.Is(err, os.ErrNotExist) {
				logf(stderr, "info", "socket %s does not exist anymore; exiting", sock)
				l.SetUnlinkOnClose(false)
				l.Close()
				return 0
			}
		}
	}
}

// parse reads getopt_long-style options, as KubeVirt's C binary does:
// -c PATH, -cPATH, --copy-path PATH, --copy-path=PATH, -n, --no-op.
// Unknown options are an error.
func parse(args []string) (copyPath string, noOp, help bool, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		var name, val string
		hasVal := false
		switch {
		case strings.HasPrefix(a, "--"):
			name, val, hasVal = strings.Cut(a[2:], "=")
		case strings.HasPrefix(a, "-c") && len(a) > 2:
			name, val, hasVal = "c", a[2:], true
		case strings.HasPrefix(a, "-") && len(a) == 2:
			name = a[1:]
		default:
			return "", false, false, fmt.Errorf("unexpected argument %q", a)
		}
		switch name {
		case "copy-path", "c":
			if !hasVal {
				if i+1 >= len(args) {
					return "", false, false, fmt.Errorf("option %s requires an argument", a)
				}
				i++
				val = args[i]
			}
			copyPath = val
		case "no-op", "n":
			noOp = true
		case "help", "h":
			help = true
		default:
			return "", false, false, fmt.Errorf("unrecognized option %q", a)
		}
	}
	return copyPath, noOp, help, nil
}

// logf writes one plain line, as the C original does: this binary runs in
// foreign images and stays free of the JSON logging package.
func logf(w io.Writer, level, format string, args ...any) {
	fmt.Fprintf(w, "%s container-disk: %s: %s\n", time.Now().UTC().Format(time.RFC3339), level, fmt.Sprintf(format, args...))
}
