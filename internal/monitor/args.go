package monitor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Defaults of KubeVirt's pod (kubevirt-wire.md 5.2 and 5.5).
const (
	DefaultLauncherPath     = "/usr/bin/virt-launcher"
	DefaultContainerDiskDir = "/var/run/kubevirt/container-disks"
	DefaultShareDir         = "/var/run/kubevirt"
	DefaultPrivateDir       = "/var/run/kubevirt-private"
	DefaultQemuStopTimeout  = 10 * time.Second
	DefaultVerbosity        = 2
)

// Environment variables of our own. They are not KubeVirt's; they exist for
// standalone installs and tests, and the launcher ignores them.
const (
	// EnvLauncherBin is the launcher binary's path. Without it the monitor
	// uses /usr/bin/virt-launcher, or virt-launcher next to its own
	// executable when /usr/bin/virt-launcher does not exist.
	EnvLauncherBin = "VIRT_LAUNCHER_BIN"
	// EnvIstioQuit set to 1 or true makes the monitor ask an istio sidecar to
	// quit after the launcher exits. Off by default: KubeVirt always probes
	// localhost:15021, which costs up to seconds in pods without istio.
	EnvIstioQuit = "VIRT_LAUNCHER_MONITOR_ISTIO_QUIT"
	// EnvQemuStopTimeout is how long a QEMU left behind gets between SIGTERM
	// and SIGKILL (a Go duration, default 10s as in KubeVirt).
	EnvQemuStopTimeout = "VIRT_LAUNCHER_MONITOR_QEMU_STOP_TIMEOUT"
	// EnvRestarts is how many times within EnvRestartWindow the monitor
	// starts a new launcher after one died while its guest ran (default
	// DefaultRestarts); 0 switches restarts off: the monitor then cleans
	// up, stopping QEMU, as KubeVirt's does.
	EnvRestarts = "VIRT_LAUNCHER_MONITOR_RESTARTS"
	// EnvRestartWindow is the window of the restart budget (a Go
	// duration, default DefaultRestartWindow).
	EnvRestartWindow = "VIRT_LAUNCHER_MONITOR_RESTART_WINDOW"
)

// Config is what the monitor does. ParseArgs fills it from the command line
// and the environment.
type Config struct {
	// LauncherPath is the launcher binary; LauncherArgs its arguments
	// (argv[1:]): all of the monitor's arguments except --keep-after-failure.
	LauncherPath string
	LauncherArgs []string

	ContainerDiskDir string // --container-disk-dir: *.sock removed at the end
	ShareDir         string // --kubevirt-share-dir (a launcher flag, peeked): passt.log
	PrivateDir       string // --private-dir (peeked, if the launcher has it): libvirt/qemu/log
	UID              string // --uid, for log lines
	Verbosity        int    // -v, before VIRT_LAUNCHER_LOG_VERBOSITY
	KeepAfterFailure bool   // --keep-after-failure: stay alive after a non-zero exit

	IstioQuit       bool          // EnvIstioQuit
	QemuStopTimeout time.Duration // EnvQemuStopTimeout
	Restarts        int           // EnvRestarts (0: off)
	RestartWindow   time.Duration // EnvRestartWindow
	Help            bool          // -h/--help was given
}

// Env is the whole environment a monitor started outside a cluster gets
// (and through it the launcher, its daemons and QEMU), as a pod's container
// would have it: an allow-list, never the caller's own. The caller's
// environment may hold secrets (tokens, proxies with passwords) that the
// launcher's user must not read in /proc, and variables the launcher acts
// on (STANDALONE_VMI, LD_PRELOAD) must not come from whatever shell started
// it. vlctl run, the test harness and the bench start monitors with it.
func Env(launcherBin string) []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		EnvLauncherBin + "=" + launcherBin,
	}
}

// Usage lists the flags and environment variables.
const Usage = `Usage: virt-launcher-monitor [flags] [launcher flags]

PID 1 of a KubeVirt launcher pod: starts virt-launcher with the same
arguments (all but --keep-after-failure), reaps zombies, forwards SIGINT,
SIGTERM and SIGQUIT to it as SIGTERM and exits with its status. A launcher
that dies of a signal (killed, crashed) while its guest runs and the pod is
not terminating is started again and takes the guest over. SIGUSR2 asks
the launcher to hand its running guest over to a new launcher started
from the same path (an upgrade of the binary without a migration).
Unknown flags are passed to the launcher untouched.

Flags (KubeVirt's):
  --container-disk-dir string   container disk dir; its *.sock files are removed
                                at the end (default /var/run/kubevirt/container-disks)
  --keep-after-failure          sleep after a non-zero exit (until SIGTERM/SIGINT),
                                for debugging; not passed to the launcher
  --uid string                  VMI uid (for log lines)
  -v, --v int                   log verbosity (default 2)
Launcher flags the monitor also reads:
  --kubevirt-share-dir string   where passt.log is (default /var/run/kubevirt)
  --private-dir string          where libvirt/qemu/log is (default /var/run/kubevirt-private)

Environment:
  VIRT_LAUNCHER_LOG_VERBOSITY              integer that overrides -v
  VIRT_LAUNCHER_BIN                        launcher binary (default /usr/bin/virt-launcher,
                                           else virt-launcher next to this executable)
  VIRT_LAUNCHER_MONITOR_ISTIO_QUIT=1       ask an istio sidecar to quit at the end
  VIRT_LAUNCHER_MONITOR_QEMU_STOP_TIMEOUT  SIGTERM->SIGKILL wait for a QEMU left behind (10s)
  VIRT_LAUNCHER_MONITOR_RESTARTS           new launchers started within the window after one
                                           died of a signal while its guest ran (5); the new
                                           one takes the guest back. 0: clean up and stop
                                           QEMU instead, as KubeVirt does
  VIRT_LAUNCHER_MONITOR_RESTART_WINDOW     the window of that budget (10m)
`

// flagKind says how a known flag takes its value.
type flagKind int

const (
	stringFlag flagKind = iota
	intFlag
	boolFlag
)

var knownFlags = map[string]flagKind{
	"container-disk-dir": stringFlag,
	"keep-after-failure": boolFlag,
	"uid":                stringFlag,
	"v":                  intFlag,
	"kubevirt-share-dir": stringFlag,
	"private-dir":        stringFlag,
	"help":               boolFlag,
	"h":                  boolFlag,
}

// ParseArgs reads the monitor's arguments (without argv[0]) the way Go's
// flag package and pflag read them: -name or --name, with the value after
// "=" or in the next argument (booleans only with "="). Unknown flags and
// positional arguments are passed through; a bad value of a known flag is
// an error. getenv is os.Getenv in production.
func ParseArgs(args []string, getenv func(string) string) (Config, error) {
	c := Config{
		ContainerDiskDir: DefaultContainerDiskDir,
		ShareDir:         DefaultShareDir,
		PrivateDir:       DefaultPrivateDir,
		Verbosity:        DefaultVerbosity,
		QemuStopTimeout:  DefaultQemuStopTimeout,
		Restarts:         DefaultRestarts,
		RestartWindow:    DefaultRestartWindow,
		LauncherArgs:     []string{},
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			c.LauncherArgs = append(c.LauncherArgs, args[i:]...)
			break
		}
		name, value, hasValue, ok := splitFlag(arg)
		kind, known := knownFlags[name]
		if !ok || !known {
			c.LauncherArgs = append(c.LauncherArgs, arg)
			continue
		}
		pass := []string{arg}
		if kind != boolFlag && !hasValue {
			if i+1 >= len(args) {
				return c, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
			pass = append(pass, value)
		}
		switch name {
		case "container-disk-dir":
			c.ContainerDiskDir = value
		case "kubevirt-share-dir":
			c.ShareDir = value
		case "private-dir":
			c.PrivateDir = value
		case "uid":
			c.UID = value
		case "v":
			v, err := strconv.Atoi(value)
			if err != nil {
				return c, fmt.Errorf("flag -v: %q is not an integer", value)
			}
			c.Verbosity = v
		case "keep-after-failure", "help", "h":
			b := true
			if hasValue {
				var err error
				if b, err = strconv.ParseBool(value); err != nil {
					return c, fmt.Errorf("flag --%s: %q is not a boolean", name, value)
				}
			}
			if name == "keep-after-failure" {
				c.KeepAfterFailure = b
				continue // the one flag the launcher never sees
			}
			c.Help = b
		}
		c.LauncherArgs = append(c.LauncherArgs, pass...)
	}

	switch s := strings.ToLower(getenv(EnvIstioQuit)); s {
	case "", "0", "false", "no":
	case "1", "true", "yes":
		c.IstioQuit = true
	default:
		return c, fmt.Errorf("%s: %q is not a boolean", EnvIstioQuit, s)
	}
	if s := getenv(EnvQemuStopTimeout); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return c, fmt.Errorf("%s: %q is not a non-negative duration", EnvQemuStopTimeout, s)
		}
		c.QemuStopTimeout = d
	}
	if s := getenv(EnvRestarts); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%s: %q is not a non-negative integer", EnvRestarts, s)
		}
		c.Restarts = n
	}
	if s := getenv(EnvRestartWindow); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("%s: %q is not a positive duration", EnvRestartWindow, s)
		}
		c.RestartWindow = d
	}
	c.LauncherPath = launcherPath(getenv(EnvLauncherBin))
	return c, nil
}

// splitFlag splits "-name", "--name", "-name=value", "--name=value".
func splitFlag(arg string) (name, value string, hasValue, ok bool) {
	if len(arg) < 2 || arg[0] != '-' {
		return "", "", false, false
	}
	s := arg[1:]
	if s[0] == '-' {
		s = s[1:]
	}
	if s == "" || s[0] == '-' || s[0] == '=' {
		return "", "", false, false
	}
	if k, v, found := strings.Cut(s, "="); found {
		return k, v, true, true
	}
	return s, "", false, true
}

// launcherPath picks the launcher binary: the environment's choice, else
// KubeVirt's fixed path, else the one installed next to the monitor.
func launcherPath(env string) string {
	if env != "" {
		return env
	}
	if _, err := os.Stat(DefaultLauncherPath); err == nil {
		return DefaultLauncherPath
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "virt-launcher")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return DefaultLauncherPath
}
