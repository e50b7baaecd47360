package libvirtd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/uuid"
)

// Config describes one private libvirt daemon (and, when asked for, its
// virtlogd).
type Config struct {
	// Dir is the launcher's private libvirt directory (layout.LibvirtDir()).
	// The generated config files are written here. In session mode it is
	// also $XDG_CONFIG_HOME/libvirt, so the daemon finds qemu.conf there and
	// keeps its domain definitions under Dir/qemu, EFI variable stores in
	// Dir/qemu/nvram and TPM state in Dir/qemu/swtpm (layout.NVRAMDir,
	// layout.SwtpmDir). swtpm_setup, which the daemon runs with its
	// environment and --create-config-files, writes its config files to
	// $XDG_CONFIG_HOME and its local CA to $XDG_CONFIG_HOME/var/lib/
	// swtpm-localca (layout.SwtpmLocalCADir). In system mode all of these
	// are libvirt's and swtpm's fixed /var/lib paths.
	Dir string
	// RuntimeDir is $XDG_RUNTIME_DIR in session mode: the sockets end up in
	// RuntimeDir/libvirt (in a pod /var/run, giving KubeVirt's
	// /var/run/libvirt/virtqemud-sock). In root mode it is the unix_sock_dir
	// parent as well.
	RuntimeDir string
	// CacheHome is $XDG_CACHE_HOME in session mode. libvirt 9.0 keeps its
	// QEMU capability cache in CacheHome/libvirt/qemu/cache/capabilities
	// (see CapabilitiesCacheDir) and the QEMU logs in
	// CacheHome/libvirt/qemu/log. Empty means the parent of Dir.
	CacheHome string

	// Root selects system mode (qemu:///system), for a launcher running as
	// uid 0 inside a container. It uses host-wide paths (/run/libvirt,
	// /var/lib/libvirt) for the QEMU driver's state and virtlogd's socket,
	// so it must not be used on a shared machine.
	Root bool

	// HostUUID is the daemon's host_uuid: the UUID it reports as the
	// host's (capabilities host/uuid) and puts in its migration cookies.
	// libvirt refuses a migration whose two daemons report the same host
	// UUID ("Attempt to migrate guest to the same host"; libvirt 9.0
	// compares nothing else), and all the launchers of one machine would
	// otherwise report that machine's SMBIOS UUID. KubeVirt's launcher
	// sets none: its root pods report the node's SMBIOS UUID, and its
	// non-root daemon (uid 107) cannot read product_uuid (0400 root) and
	// gets a random one from libvirt at every start (docs/migration.md
	// §6). Empty: Start picks a random one, which stays the same across
	// restarts of the daemon (the config file is written once). It must
	// be in the canonical 8-4-4-4-12 form and not have all 16 bytes
	// equal (libvirt's own validity rule: such a daemon would not start).
	HostUUID string

	// LogFilters is libvirt's log_filters (from --libvirt-log-filters or
	// the VMI annotation). Empty keeps the quiet default.
	LogFilters string
	// Debug enables libvirt's debug output (verbosity above 5 or
	// LIBVIRT_DEBUG_LOGS=1).
	Debug bool

	// Virtlogd starts a supervised virtlogd beside the daemon and has QEMU
	// write its log and the serial console log through it
	// (stdio_handler = "logd"), which caps each file's size (max_size 1 MiB,
	// one backup). Off (the default), QEMU writes both files itself
	// (stdio_handler = "file"): one process less, about 18 MiB RSS (5 MiB
	// PSS) and 30 ms of start-up less per VM, but nothing caps the files.
	Virtlogd bool

	// DaemonPath and VirtlogdPath override the binaries; empty means search
	// $PATH and /usr/sbin for virtqemud, then libvirtd, and virtlogd.
	DaemonPath   string
	VirtlogdPath string

	// CapsSeedDir, when set, is a directory of QEMU capability cache files
	// shared by the launchers of one machine (same user, same libvirt and
	// QEMU). Its files are copied into the daemon's cache before start, and
	// files the daemon created are copied back at Stop, so only the first
	// launcher pays for the probe. libvirt checks each file's validity
	// (libvirt and QEMU versions and ctimes) itself and re-probes when a file
	// is stale.
	CapsSeedDir string

	// Credential, when set, runs both daemons as that user. The launcher
	// never needs it (it runs as the unprivileged user itself); tests
	// running as root use it to start the daemons as an ordinary user.
	// The directories are chowned to that user.
	Credential *syscall.Credential

	// SpawnSetup, when set, runs once on the thread that starts the
	// daemons (and restarts them), before the first start; they inherit
	// what it sets up. vlctl's capability probe enters a mount namespace
	// with the prober's passwd entry there (pod.Enter). An error fails
	// Start; undo runs on that thread when it ends, after the daemons.
	SpawnSetup func() (undo func(), err error)
}

// configHome is $XDG_CONFIG_HOME in session mode: Dir must be <it>/libvirt
// for the daemon to find qemu.conf, so Dir's parent is used.
func (c Config) configHome() string { return filepath.Dir(c.Dir) }

func (c Config) cacheHome() string {
	if c.CacheHome != "" {
		return c.CacheHome
	}
	return filepath.Dir(c.Dir)
}

// CapabilitiesCacheDir is where the daemon caches its QEMU capability probe:
// libvirt 9.0's QEMU driver has its cache dir at
// $XDG_CACHE_HOME/libvirt/qemu/cache in session mode
// (/var/cache/libvirt/qemu in system mode) and writes one
// capabilities/<sha256 of the QEMU path>.xml below it. A cold
// cache costs the first define about 2.5 s here (TCG, loaded machine); a
// warm one about 0.1 s. See CapsSeedDir.
func (c Config) CapabilitiesCacheDir() string {
	if c.Root {
		return "/var/cache/libvirt/qemu/capabilities"
	}
	return filepath.Join(c.cacheHome(), "libvirt", "qemu", "cache", "capabilities")
}

// SocketDir is the directory holding the daemon's and virtlogd's sockets.
func (c Config) SocketDir() string { return filepath.Join(c.RuntimeDir, "libvirt") }

func (c Config) validate() error {
	if c.Dir == "" || !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("libvirtd config: Dir %q must be an absolute path", c.Dir)
	}
	if filepath.Base(c.Dir) != "libvirt" {
		return fmt.Errorf("libvirtd config: Dir %q must end in /libvirt (it is $XDG_CONFIG_HOME/libvirt)", c.Dir)
	}
	if c.RuntimeDir == "" || !filepath.IsAbs(c.RuntimeDir) {
		return fmt.Errorf("libvirtd config: RuntimeDir %q must be an absolute path", c.RuntimeDir)
	}
	if c.HostUUID != "" {
		if err := checkHostUUID(c.HostUUID); err != nil {
			return fmt.Errorf("libvirtd config: %w", err)
		}
	}
	// sun_path holds 108 bytes including the terminating NUL.
	if n := len(filepath.Join(c.SocketDir(), "virtqemud-admin-sock")); n > 107 {
		return fmt.Errorf("libvirtd config: RuntimeDir %q is too long for unix sockets (%d > 107 bytes)", c.RuntimeDir, n)
	}
	return nil
}

// checkHostUUID refuses what libvirt's daemon would refuse at start-up
// ("invalid host UUID"), and any spelling other than the canonical one, so
// that the UUID the daemon reports is the string we configured.
func checkHostUUID(s string) error {
	u, err := uuid.Parse(s)
	if err != nil || u.String() != strings.ToLower(s) {
		return fmt.Errorf("HostUUID %q: not a UUID in the 8-4-4-4-12 form", s)
	}
	same := true
	for _, b := range u[1:] {
		same = same && b == u[0]
	}
	if same {
		return fmt.Errorf("HostUUID %q: libvirt refuses a host UUID whose 16 bytes are all equal", s)
	}
	return nil
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// daemonConf is libvirtd.conf / virtqemud.conf. One client (the launcher)
// plus the handler's migration proxy and virsh for debugging need a handful
// of connections; a small worker pool keeps the daemon's memory down.
func (c Config) daemonConf() string {
	var b strings.Builder
	b.WriteString("# Written by virt-launcher; regenerated on every start.\n")
	c.writeLogging(&b)
	b.WriteString("max_clients = 16\nmax_queued_clients = 16\nmax_anonymous_clients = 16\n")
	b.WriteString("min_workers = 1\nmax_workers = 4\nprio_workers = 2\nmax_client_requests = 8\n")
	b.WriteString("admin_min_workers = 1\nadmin_max_workers = 1\nadmin_max_clients = 2\n")
	b.WriteString("keepalive_interval = -1\n")
	if c.HostUUID != "" {
		fmt.Fprintf(&b, "host_uuid = %s\n", quote(c.HostUUID))
	}
	if c.Root {
		// System mode: keep the sockets in our runtime dir, reachable by
		// root only; no polkit.
		fmt.Fprintf(&b, "unix_sock_dir = %s\n", quote(c.SocketDir()))
		b.WriteString("unix_sock_rw_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n")
		b.WriteString("listen_tls = 0\nlisten_tcp = 0\n")
	}
	return b.String()
}

func (c Config) virtlogdConf() string {
	var b strings.Builder
	b.WriteString("# Written by virt-launcher; regenerated on every start.\n")
	c.writeLogging(&b)
	b.WriteString("max_clients = 16\nadmin_max_clients = 2\n")
	// The serial log and QEMU's own log rotate small: they are read by
	// virt-tail and the monitor, not archived.
	b.WriteString("max_size = 1048576\nmax_backups = 1\n")
	return b.String()
}

func (c Config) writeLogging(b *strings.Builder) {
	switch {
	case c.Debug && c.LogFilters == "":
		b.WriteString("log_filters = \"3:remote 4:event 3:util.json 3:util.object 3:util.dbus 3:util.netlink 3:node_device 3:rpc 3:access 1:*\"\n")
		b.WriteString("log_outputs = \"1:stderr\"\n")
	case c.LogFilters != "":
		fmt.Fprintf(b, "log_filters = %s\n", quote(c.LogFilters))
		b.WriteString("log_outputs = \"1:stderr\"\n")
	default:
		b.WriteString("log_level = 3\nlog_outputs = \"3:stderr\"\n")
	}
}

// qemuConf is the QEMU driver config. Session mode reads it from
// $XDG_CONFIG_HOME/libvirt/qemu.conf; system mode only from
// /etc/libvirt/qemu.conf, so in root mode it is written there only inside a
// container (see writeConfigs).
func (c Config) qemuConf() string {
	var b strings.Builder
	b.WriteString("# Written by virt-launcher; regenerated on every start.\n")
	if c.Virtlogd {
		b.WriteString("stdio_handler = \"logd\"\n")
	} else {
		// QEMU opens the serial log itself and libvirt hands it an fd
		// of the domain log: no virtlogd needed.
		b.WriteString("stdio_handler = \"file\"\n")
	}
	b.WriteString("max_core = 0\n")
	if c.Root {
		b.WriteString("user = \"root\"\ngroup = \"root\"\n")
		b.WriteString("namespaces = [ ]\ncgroup_controllers = [ ]\n")
		// QEMU runs as root here and can open what it needs as it is;
		// with dynamic ownership libvirt would hand the serial console
		// log (made by the launcher for the qemu user, as KubeVirt's is)
		// to root, and the pod's guest-console-log container (uid 107)
		// could no longer read it.
		b.WriteString("dynamic_ownership = 0\nremember_owner = 0\n")
	}
	return b.String()
}

// writeConfigs writes the config files atomically into Dir and returns the
// paths of the daemon's and virtlogd's files.
func (c Config) writeConfigs(daemonName string) (daemonConf, logdConf string, err error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return "", "", fmt.Errorf("create %s: %w", c.Dir, err)
	}
	daemonConf = filepath.Join(c.Dir, daemonName+".conf")
	logdConf = filepath.Join(c.Dir, "virtlogd.conf")
	files := map[string]string{daemonConf: c.daemonConf()}
	if c.Virtlogd {
		files[logdConf] = c.virtlogdConf()
	} else {
		logdConf = ""
	}
	if !c.Root {
		files[filepath.Join(c.Dir, "qemu.conf")] = c.qemuConf()
	}
	for path, content := range files {
		if err := writeAtomic(path, content); err != nil {
			return "", "", err
		}
	}
	return daemonConf, logdConf, nil
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// qemuDriverModule is the QEMU driver's module file, in libvirt's
// connection-driver directory.
const qemuDriverModule = "libvirt_driver_qemu.so"

// driverSearch is where distributions install libvirt's connection-driver
// modules (Debian's multiarch dir first).
var driverSearch = []string{
	"/usr/lib/*-linux-gnu*/libvirt/connection-driver",
	"/usr/lib64/libvirt/connection-driver",
	"/usr/lib/libvirt/connection-driver",
	"/usr/local/lib*/libvirt/connection-driver",
}

// findQEMUDriver returns the path of the installed QEMU driver module.
func findQEMUDriver() (string, error) {
	for _, pattern := range driverSearch {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			p := filepath.Join(d, qemuDriverModule)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s not found in %s", qemuDriverModule, strings.Join(driverSearch, ", "))
}

// driverDir makes Dir/connection-driver hold a link to the QEMU driver
// module alone and returns it, for LIBVIRT_DRIVER_DIR. The monolithic
// libvirtd otherwise loads every module installed (network, nodedev,
// nwfilter, interface, secret, storage and its backends), none of which a
// launcher uses: its domains have ethernet interfaces and file or block
// disks. That is about 2.4 MiB RSS and half the daemon's start-up time.
// virtqemud loads the same module from the same kind of directory.
// It returns "" and an error when the module is not where it is looked
// for; the daemon then loads what is installed, as without us.
func (c Config) driverDir(kind string) (string, error) {
	if kind != "libvirtd" && kind != "virtqemud" {
		// A DaemonPath of another name: we do not know what it loads.
		return "", nil
	}
	mod, err := findQEMUDriver()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(c.Dir, "connection-driver")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	link := filepath.Join(dir, qemuDriverModule)
	if cur, err := os.Readlink(link); err != nil || cur != mod {
		_ = os.Remove(link)
		if err := os.Symlink(mod, link); err != nil {
			return "", fmt.Errorf("link %s: %w", link, err)
		}
	}
	if cr := c.Credential; cr != nil {
		if err := os.Lchown(dir, int(cr.Uid), int(cr.Gid)); err != nil {
			return "", fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	return dir, nil
}
