package pod

import (
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
)

// Monitor is the compute container's process of a launcher pod:
// virt-launcher-monitor, which starts virt-launcher with the same flags.
// vlctl run, the test harness and the bench describe their pods with it,
// so that the three start the same process the same way.
type Monitor struct {
	// Bin and Launcher are virt-launcher-monitor and virt-launcher.
	Bin, Launcher string
	// Flags is the launcher's command line (launcherflags.Args renders it);
	// Extra are more flags after it (tests pass unusual ones).
	Flags launcherflags.Options
	Extra []string
	// User is who the pod's processes run as; never root on a plain
	// machine.
	User *syscall.Credential
	// Network says the pod has a network of its own: the launcher's DHCP
	// server binds ports 67 and 547 on the bridge, so the process keeps
	// CAP_NET_BIND_SERVICE, the one capability a KubeVirt launcher pod
	// keeps (the compute container's capabilities.add).
	Network bool
	// Env are more variables for the monitor and its launcher (a device
	// plugin's, e.g. PCI_RESOURCE_<R>=<address>).
	Env []string
	// Dir is the working directory, the pod's directory.
	Dir string
	// Stdout and Stderr take the monitor's output (both the launcher's log
	// and QEMU's).
	Stdout, Stderr io.Writer
}

// waitDelay bounds how long Wait waits for the output pipes once the
// monitor is gone: a process of the pod that left its process group (a
// daemonized helper) may still hold them, and a test once hung 22 minutes
// on that. The caller then kills what is left.
const waitDelay = 10 * time.Second

// Command is the monitor's exec.Cmd, to be started with Start from the
// pod's namespaces: the allow-listed environment (monitor.Env), a process
// group of its own (a Ctrl-C on vlctl's terminal reaches vlctl only, which
// shuts the guest down in order; the tests signal the whole group), and
// SIGTERM when the thread that started it ends (Start keeps that thread
// for the child's lifetime).
func (m Monitor) Command() *exec.Cmd {
	cmd := exec.Command(m.Bin, append(m.Flags.Args(), m.Extra...)...)
	cmd.Env = append(monitor.Env(m.Launcher), m.Env...)
	cmd.Dir = m.Dir
	cmd.Stdout, cmd.Stderr = m.Stdout, m.Stderr
	cmd.WaitDelay = waitDelay
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: m.User,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGTERM,
	}
	if m.Network {
		cmd.SysProcAttr.AmbientCaps = []uintptr{monitor.CapNetBindService}
	}
	return cmd
}
