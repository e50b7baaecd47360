package monitor

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// maxRelay bounds how much of each log file is relayed: its last 256 KiB.
// QEMU's log of a long-lived VM can be large, and the monitor must stay small.
const maxRelay = 256 << 10

// systemQemuLogDir is where a libvirt daemon in system mode (a launcher
// running as root) writes QEMU's logs.
const systemQemuLogDir = "/var/log/libvirt/qemu"

// dumpLogs relays passt's log and every QEMU log of the private libvirt
// daemon to our own log, one line per line, so that they survive the pod.
// The session daemon's logs are under the private dir; the system-mode
// directory is read only when we are PID 1 of a container, where it belongs
// to this pod alone (on a shared machine it holds other VMs' logs).
func dumpLogs(log *slog.Logger, c Config, pid1 bool) {
	relayFile(log.With(slog.String("subcomponent", "passt")), filepath.Join(c.ShareDir, "passt.log"))
	files, err := filepath.Glob(filepath.Join(c.PrivateDir, "libvirt", "qemu", "log", "*"))
	if err != nil {
		return
	}
	if pid1 {
		sys, _ := filepath.Glob(filepath.Join(systemQemuLogDir, "*"))
		files = append(files, sys...)
	}
	sort.Strings(files)
	qlog := log.With(slog.String("subcomponent", "qemu"))
	for _, f := range files {
		relayFile(qlog, f)
	}
}

func relayFile(log *slog.Logger, path string) {
	f, err := os.Open(path)
	if err != nil {
		return // absent: nothing to relay
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return
	}
	if st.Size() > maxRelay {
		if _, err := f.Seek(st.Size()-maxRelay, io.SeekStart); err != nil {
			return
		}
		log.Info("log truncated to its end", "file", path, "size", st.Size())
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), "\r"); line != "" {
			log.Info(line, "file", filepath.Base(path))
		}
	}
}

// quitIstio asks an istio-proxy sidecar to exit, as KubeVirt's monitor does
// (otherwise the pod of a finished VMI never completes): if
// localhost:15021/healthz/ready answers with "server: envoy", POST
// localhost:15020/quitquitquit. Plain HTTP/1.0 over a blocking socket, to keep
// net and net/http (and their memory) out of the monitor.
func quitIstio(log *slog.Logger, readyPort, quitPort int) {
	resp, err := httpRequest(readyPort, "GET", "/healthz/ready")
	if err != nil || !hasHeader(resp, "server", "envoy") {
		return
	}
	if _, err := httpRequest(quitPort, "POST", "/quitquitquit"); err != nil {
		log.Warn("failed to ask istio-proxy to quit", "reason", err)
		return
	}
	log.Info("asked istio-proxy to quit")
}

func httpRequest(port int, method, path string) (string, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	// Blocking socket with kernel timeouts; on Linux SO_SNDTIMEO also bounds connect(2).
	tv := syscall.Timeval{Sec: 1}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv)
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "", err
	}
	req := method + " " + path + " HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
	if _, err := syscall.Write(fd, []byte(req)); err != nil {
		return "", err
	}
	var resp []byte
	buf := make([]byte, 4096)
	for len(resp) < 16<<10 {
		n, err := syscall.Read(fd, buf)
		if n > 0 {
			resp = append(resp, buf[:n]...)
		}
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			if len(resp) == 0 && err != nil {
				return "", err
			}
			break
		}
	}
	return string(resp), nil
}

// hasHeader reports whether an HTTP response head has header name with
// value (both case-insensitive).
func hasHeader(resp, name, value string) bool {
	head, _, _ := strings.Cut(resp, "\r\n\r\n")
	for _, l := range strings.Split(head, "\r\n")[1:] {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), name) && strings.EqualFold(strings.TrimSpace(v), value) {
			return true
		}
	}
	return false
}
