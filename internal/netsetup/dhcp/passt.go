package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// passtStartTimeout bounds passt's start: its first process exits once
// the daemon it forks has bound the socket and the forwarded ports.
const passtStartTimeout = 30 * time.Second

// passtStopWait is how long a stopped passt gets to end before SIGKILL.
const passtStopWait = 5 * time.Second

// startPasst is the passt binding's unprivileged phase: a passt daemon of
// the pod's user in the pod's network namespace, serving the guest
// (DHCP, DNS, NDP, its traffic through the pod's sockets) on the socket
// QEMU's NIC connects to (plan.PasstSocket), with KubeVirt's port
// forwards. libvirt starts passt itself where its passt backend is built;
// Debian 12's libvirt has it disabled, so the launcher does what libvirt
// would. A passt left running by a launcher that died while its guest ran
// is taken over, since the guest's QEMU is still connected to it.
func (s *Servers) startPasst(ctx context.Context, vmi *v1.VirtualMachineInstance, it plan.Iface, resolvers func() (DNSConfig, error)) (served, error) {
	if os.Geteuid() == 0 {
		// passt switches to nobody when started as root, and nobody can
		// write nothing of the pod's.
		return served{}, errors.New("passtBinding: passt does not run as root, and this launcher does (a root pod)")
	}
	dir := s.cfg.CacheDir
	sock, pidFile := plan.PasstSocket(dir, it.PodIface), plan.PasstPidFile(dir, it.PodIface)
	if p := runningPasst(pidFile, sock); p != nil {
		s.log.Info("passt of a previous launcher taken over", "iface", it.Name, "pid", p.Pid, "socket", sock)
		return served{closers: []func() error{func() error { return stopPasst(p) }}}, nil
	}
	for _, f := range []string{sock, pidFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return served{}, fmt.Errorf("passt: %w", err)
		}
	}
	dns, err := resolvers()
	if err != nil {
		return served{}, err
	}
	args := passtArgs(vmi, it, sock, pidFile, s.cfg.PasstLog, dns)
	bin := s.cfg.Passt
	if bin == "" {
		bin = "passt"
	}
	cctx, cancel := context.WithTimeout(ctx, passtStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	// The daemon points its standard streams at /dev/null; should it not,
	// its first process's exit still ends the wait.
	cmd.WaitDelay = time.Second
	if err := plan.InNS(s.cfg.NetNS, cmd.Start); err != nil {
		return served{}, fmt.Errorf("start passt: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		return served{}, fmt.Errorf("passt %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	p, err := passtProcess(pidFile)
	if err != nil {
		return served{}, err
	}
	if _, err := os.Stat(sock); err != nil {
		return served{}, errors.Join(fmt.Errorf("passt did not bind its socket: %w", err), stopPasst(p))
	}
	s.log.Info("passt started", "iface", it.Name, "pid", p.Pid, "socket", sock, "args", strings.Join(args, " "))
	return served{closers: []func() error{func() error { return stopPasst(p) }}}, nil
}

// passtArgs is passt's command line for the interface: the pod interface
// it takes its addresses and routes from, its socket and pid file, the
// log where virt-handler reads it, the pod's resolvers and search domains
// for the guest, and the forwards.
func passtArgs(vmi *v1.VirtualMachineInstance, it plan.Iface, sock, pidFile, logFile string, dns DNSConfig) []string {
	args := []string{"--quiet", "--socket", sock, "--pid", pidFile, "--interface", it.PodIface}
	if logFile != "" {
		args = append(args, "--log-file", logFile)
	}
	for _, ip := range append(append([]net.IP(nil), dns.Servers4...), dns.Servers6...) {
		args = append(args, "--dns", ip.String())
	}
	if len(dns.Search) > 0 {
		args = append(args, "--search", strings.Join(dns.Search, " "))
	}
	tcp, udp := plan.PasstForwards(vmi, it.Ports)
	if tcp == "" {
		tcp = "none"
	}
	if udp == "" {
		udp = "none"
	}
	return append(args, "--tcp-ports", tcp, "--udp-ports", udp)
}

// passtProcess is the passt daemon whose pid is in pidFile, pinned (a
// pidfd) and checked to be passt.
func passtProcess(pidFile string) (*os.Process, error) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, fmt.Errorf("passt pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return nil, fmt.Errorf("passt pid file %s: %q is not a pid", pidFile, b)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("passt pid %d: %w", pid, err)
	}
	// Checked after the pidfd pinned the process: it cannot be another
	// one by now.
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil || !strings.HasPrefix(string(comm), "passt") {
		p.Release()
		return nil, fmt.Errorf("pid %d of %s is not passt (%q, %v)", pid, pidFile, strings.TrimSpace(string(comm)), err)
	}
	return p, nil
}

// runningPasst is the passt a previous launcher of the pod started for
// this socket, if it still runs.
func runningPasst(pidFile, sock string) *os.Process {
	if _, err := os.Stat(sock); err != nil {
		return nil
	}
	p, err := passtProcess(pidFile)
	if err != nil {
		return nil
	}
	if p.Signal(syscall.Signal(0)) != nil {
		p.Release()
		return nil
	}
	return p
}

// stopPasst ends passt: SIGTERM, then SIGKILL after passtStopWait.
func stopPasst(p *os.Process) error {
	defer p.Release()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return nil
		}
		return fmt.Errorf("stop passt %d: %w", p.Pid, err)
	}
	for deadline := time.Now().Add(passtStopWait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone) {
			return nil
		}
	}
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill passt %d: %w", p.Pid, err)
	}
	return nil
}
