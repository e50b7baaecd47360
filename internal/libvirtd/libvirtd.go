// Package libvirtd starts and supervises the launcher's private libvirt
// daemon (virtqemud where installed, else the monolithic libvirtd) and,
// when Config.Virtlogd asks for it, its virtlogd.
//
// Non-root (the default, and KubeVirt's non-root pods): the daemons run in
// session mode as the launcher's own user, with XDG_RUNTIME_DIR,
// XDG_CONFIG_HOME and XDG_CACHE_HOME pointing into the launcher's private
// directories, so any number of launchers share one machine and nothing
// under /etc/libvirt or /run/libvirt is touched. Root: system mode, for a
// launcher that is uid 0 inside a container.
//
// Lean by default: QEMU writes its log and the serial console log itself
// (no virtlogd), and the daemon loads only its QEMU driver module
// (LIBVIRT_DRIVER_DIR pointing at a directory holding just that module).
//
// A daemon that dies is started again; QEMU keeps running meanwhile (libvirt
// daemonizes it) and the new daemon reconnects to it from its status files.
package libvirtd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// Daemon is a running, supervised libvirt daemon (and virtlogd).
type Daemon struct {
	cfg  Config
	log  *slog.Logger
	kind string // "virtqemud" or "libvirtd"
	// driverDir is LIBVIRT_DRIVER_DIR, "" to let the daemon load every
	// module installed.
	driverDir string

	main *child
	logd *child // nil unless Config.Virtlogd

	restarted chan struct{}
	// spawns runs cmd.Start on one OS thread that lives as long as the
	// daemons: Pdeathsig fires when the *thread* that forked a child ends,
	// and Go ends threads whose goroutine exits while locked to them (as
	// network-namespace code does). A dedicated, locked thread never ends
	// early.
	spawns    chan func()
	spawnOnce sync.Once
	stopOnce  sync.Once
	stopping  chan struct{}
	wg        sync.WaitGroup
}

// child is one supervised process.
type child struct {
	name string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has been reaped
}

// FindDaemon returns the path and kind of the libvirt daemon to run:
// virtqemud if installed, else libvirtd.
func FindDaemon() (path, kind string, err error) {
	for _, name := range []string{"virtqemud", "libvirtd"} {
		if p, err := lookPath(name); err == nil {
			return p, name, nil
		}
	}
	return "", "", errors.New("neither virtqemud nor libvirtd is installed (Debian: apt-get install libvirt-daemon libvirt-daemon-driver-qemu)")
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in $PATH or /usr/sbin", name)
}

// InContainer reports whether this process looks like it runs in a
// container, where root mode's host-wide paths belong to the container: a
// Kubernetes pod (KUBERNETES_SERVICE_HOST, which the kubelet always sets),
// podman's /run/.containerenv, or the container variable podman, LXC and
// systemd-nspawn set (docker run -e container=docker for Docker). Docker's
// /.dockerenv does not count: a root file system made from an image keeps
// it on machines that are no container (a microVM's, say), where root mode
// would write the machine's own /etc/libvirt/qemu.conf.
func InContainer() bool {
	if _, err := os.Stat("/run/.containerenv"); err == nil {
		return true
	}
	return os.Getenv("container") != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// Start writes the config files, starts the daemon (and virtlogd, with
// Config.Virtlogd), and returns once their sockets accept connections.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Daemon, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.HostUUID == "" {
		// One per daemon we start (that is, per launcher pod), never
		// derived from the VMI: a migration's source and target pods
		// run the same VMI and must differ (see Config.HostUUID).
		cfg.HostUUID = uuid.NewString()
	}
	if cfg.Root && !InContainer() && os.Getenv("VIRTLAUNCHER_ALLOW_HOST_SYSTEM_MODE") != "1" {
		return nil, errors.New("root mode outside a container would share the host's /run/libvirt and /var/lib/libvirt with the system daemon; run the launcher as an unprivileged user (session mode)")
	}
	daemonPath, kind := cfg.DaemonPath, ""
	if daemonPath == "" {
		var err error
		if daemonPath, kind, err = FindDaemon(); err != nil {
			return nil, err
		}
	} else {
		kind = filepath.Base(daemonPath)
	}
	logdPath := cfg.VirtlogdPath
	if cfg.Virtlogd && logdPath == "" {
		var err error
		if logdPath, err = lookPath("virtlogd"); err != nil {
			return nil, fmt.Errorf("virtlogd: %w", err)
		}
	}
	dirs := []string{cfg.configHome(), cfg.Dir, cfg.cacheHome(), cfg.RuntimeDir}
	if cfg.Root {
		// unix_sock_dir: the daemon does not create it (session mode
		// creates $XDG_RUNTIME_DIR/libvirt itself).
		dirs = append(dirs, cfg.SocketDir())
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	daemonConf, logdConf, err := cfg.writeConfigs(kind)
	if err != nil {
		return nil, err
	}
	if cr := cfg.Credential; cr != nil {
		for _, p := range []string{cfg.configHome(), cfg.Dir, cfg.cacheHome(), cfg.RuntimeDir, daemonConf, logdConf, filepath.Join(cfg.Dir, "qemu.conf")} {
			if p == "" {
				continue
			}
			if err := os.Lchown(p, int(cr.Uid), int(cr.Gid)); err != nil && !os.IsNotExist(err) {
				return nil, fmt.Errorf("chown %s: %w", p, err)
			}
		}
	}
	if cfg.CapsSeedDir != "" {
		if n, err := copyXML(cfg.CapsSeedDir, cfg.CapabilitiesCacheDir(), cfg.Credential); err != nil {
			log.Warn("seed the QEMU capability cache", "reason", err.Error())
		} else if n > 0 {
			log.Info("seeded the QEMU capability cache", "files", n, "from", cfg.CapsSeedDir)
		}
		if cr := cfg.Credential; cr != nil && !cfg.Root {
			// The daemon runs as that user and must own what we created.
			for d := cfg.CapabilitiesCacheDir(); strings.HasPrefix(d, cfg.cacheHome()+"/"); d = filepath.Dir(d) {
				_ = os.Chown(d, int(cr.Uid), int(cr.Gid))
			}
		}
	}
	if cfg.Root {
		if err := writeAtomic("/etc/libvirt/qemu.conf", cfg.qemuConf()); err != nil {
			return nil, fmt.Errorf("root mode: %w", err)
		}
	}

	drvDir, err := cfg.driverDir(kind)
	if err != nil {
		// Not fatal: the daemon loads every module installed, as it
		// would without us.
		log.Warn("load only the QEMU driver", "reason", err.Error())
	}

	d := &Daemon{
		cfg:       cfg,
		log:       log.With("subcomponent", "libvirt"),
		kind:      kind,
		driverDir: drvDir,
		main:      &child{name: kind, args: []string{daemonPath, "--config", daemonConf}},
		restarted: make(chan struct{}, 1),
		stopping:  make(chan struct{}),
		spawns:    make(chan func()),
	}
	if cfg.Virtlogd {
		d.logd = &child{name: "virtlogd", args: []string{logdPath, "-f", logdConf}}
	}
	setup := make(chan error, 1)
	go d.spawner(setup)
	if err := <-setup; err != nil {
		d.spawnOnce.Do(func() { close(d.spawns) })
		return nil, fmt.Errorf("set up the thread that starts %s: %w", kind, err)
	}
	// Both at once: the daemon needs virtlogd only when QEMU starts, which
	// is after Start returned, when both sockets answer. (A session daemon
	// that found no virtlogd socket then would spawn an unsupervised one.)
	children := []*child{d.main}
	if d.logd != nil {
		children = append(children, d.logd)
	}
	for _, c := range children {
		if err := d.spawn(c); err != nil {
			d.Stop(context.Background())
			return nil, err
		}
	}
	for _, c := range children {
		if err := waitSocket(ctx, d.socketOf(c), c); err != nil {
			d.Stop(context.Background())
			return nil, fmt.Errorf("%s did not come up: %w", c.name, err)
		}
	}
	if err := d.linkKubeVirtSocket(); err != nil {
		d.Stop(context.Background())
		return nil, err
	}
	d.wg.Add(len(children))
	for _, c := range children {
		go d.supervise(c)
	}
	return d, nil
}

// kubevirtSocketName is the name KubeVirt's virt-handler gives the daemon's
// socket: its migration proxy on the target node dials
// /proc/<launcher pid>/root/var/run/libvirt/virtqemud-sock
// (pkg/virt-handler/migration-target.go handleTargetMigrationProxy).
const kubevirtSocketName = "virtqemud-sock"

// linkKubeVirtSocket makes virtqemud-sock exist beside the monolithic
// libvirtd's libvirt-sock (Debian 12 has no virtqemud), so the handler's
// migration proxy reaches the daemon by KubeVirt's name. The link is
// relative: the handler resolves it through /proc/<pid>/root, where an
// absolute target would be looked up in the handler's own root. It
// outlives daemon restarts (removeSockets removes sockets only) and goes
// at Stop.
func (d *Daemon) linkKubeVirtSocket() error {
	if d.kind != "libvirtd" {
		return nil
	}
	link := filepath.Join(d.cfg.SocketDir(), kubevirtSocketName)
	target := filepath.Base(d.Socket())
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	// Whatever else has the name (a stale link, a socket a virtqemud left
	// in this private directory) would hide our daemon from the handler.
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("replace %s: %w", link, err)
	}
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("link %s to %s: %w", link, target, err)
	}
	if cr := d.cfg.Credential; cr != nil {
		if err := os.Lchown(link, int(cr.Uid), int(cr.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", link, err)
		}
	}
	return nil
}

// unlinkKubeVirtSocket removes the link linkKubeVirtSocket made, once the
// daemon it names is gone.
func (d *Daemon) unlinkKubeVirtSocket() {
	if d.kind != "libvirtd" {
		return
	}
	link := filepath.Join(d.cfg.SocketDir(), kubevirtSocketName)
	if cur, err := os.Readlink(link); err == nil && cur == filepath.Base(d.Socket()) {
		_ = os.Remove(link)
	}
}

// socketOf is the socket that shows c is up.
func (d *Daemon) socketOf(c *child) string {
	if c == d.logd {
		return d.LogSocket()
	}
	return d.Socket()
}

// HostUUID is the host UUID the daemon reports (Config.HostUUID, or the
// one Start picked).
func (d *Daemon) HostUUID() string { return d.cfg.HostUUID }

// KubeVirtSocket is the daemon's socket by the name KubeVirt's virt-handler
// dials (virtqemud-sock): the socket itself for virtqemud, a link to
// libvirt-sock for libvirtd.
func (d *Daemon) KubeVirtSocket() string {
	return filepath.Join(d.cfg.SocketDir(), kubevirtSocketName)
}

// Virtlogd reports whether a virtlogd runs beside the daemon.
func (d *Daemon) Virtlogd() bool { return d.logd != nil }

// Kind is "virtqemud" or "libvirtd".
func (d *Daemon) Kind() string { return d.kind }

// Socket is the daemon's read-write unix socket.
func (d *Daemon) Socket() string {
	name := "libvirt-sock"
	if d.kind == "virtqemud" {
		name = "virtqemud-sock"
	}
	return filepath.Join(d.cfg.SocketDir(), name)
}

// LogSocket is virtlogd's socket (where it would be: see Virtlogd).
func (d *Daemon) LogSocket() string {
	if d.cfg.Root {
		return "/run/libvirt/virtlogd-sock"
	}
	return filepath.Join(d.cfg.SocketDir(), "virtlogd-sock")
}

// URI is the libvirt connection URI to ask for once connected to Socket.
func (d *Daemon) URI() string {
	if d.cfg.Root {
		return "qemu:///system"
	}
	return "qemu:///session"
}

// CapabilitiesCacheDir is the daemon's QEMU capability cache.
func (d *Daemon) CapabilitiesCacheDir() string { return d.cfg.CapabilitiesCacheDir() }

// LogDir is where libvirt writes each domain's QEMU log (<domain>.log).
func (d *Daemon) LogDir() string {
	if d.cfg.Root {
		return "/var/log/libvirt/qemu"
	}
	return filepath.Join(d.cfg.cacheHome(), "libvirt", "qemu", "log")
}

// Pids returns the current process ids of the daemon and virtlogd (0 when
// one is between restarts; virtlogd 0 when it is off).
func (d *Daemon) Pids() (daemon, virtlogd int) {
	if d.logd == nil {
		return d.main.pid(), 0
	}
	return d.main.pid(), d.logd.pid()
}

// Restarted receives a value after the daemon (not virtlogd) was restarted
// and accepts connections again: clients must reconnect and re-subscribe.
func (d *Daemon) Restarted() <-chan struct{} { return d.restarted }

// Replace kills the daemon (SIGKILL) so that its supervisor starts a new
// one, for a daemon that no longer answers (hung): its clients' calls end
// with the connection, and they reconnect as after any death of it.
func (d *Daemon) Replace() error {
	cmd, done := d.main.current()
	if cmd == nil {
		return errors.New("no daemon runs")
	}
	select {
	case <-done:
		return nil // already dead: being restarted
	default:
	}
	d.log.Warn("replacing "+d.main.name+", which does not answer", "pid", cmd.Process.Pid)
	return cmd.Process.Kill()
}

// Stop sends SIGTERM to the daemon (and virtlogd) and waits for them; SIGKILL when ctx
// ends first. QEMU is not touched: libvirt leaves running guests alone on
// SIGTERM.
func (d *Daemon) Stop(ctx context.Context) error {
	d.stopOnce.Do(func() { close(d.stopping) })
	var errs []error
	for _, c := range []*child{d.main, d.logd} {
		if c == nil {
			continue
		}
		err := c.stop(ctx)
		// A daemon that exits on SIGTERM normally unlinks its sockets,
		// but only once the last reference to its server is dropped: one
		// stopped while a client call was still in flight leaves them
		// (seen under load, a launcher stopped a few ms after its first
		// Sync began). The process is gone either way, so any socket of
		// its name in its own directory is stale.
		d.removeSockets(c)
		if err != nil {
			errs = append(errs, err)
			d.removeDomainDirs(c)
		}
	}
	d.wg.Wait()
	d.unlinkKubeVirtSocket()
	d.removeProbeDirs()
	d.spawnOnce.Do(func() { close(d.spawns) })
	if d.cfg.CapsSeedDir != "" {
		if n, err := copyXML(d.cfg.CapabilitiesCacheDir(), d.cfg.CapsSeedDir, nil); err != nil {
			d.log.Debug("save the QEMU capability cache", "reason", err.Error())
		} else if n > 0 {
			d.log.Info("saved the QEMU capability cache", "files", n, "to", d.cfg.CapsSeedDir)
		}
	}
	return errors.Join(errs...)
}

// removeProbeDirs removes the directories (qmp-XXXXXX, holding QEMU's
// monitor socket) that the session daemon makes under its qemu/lib for a
// capability probe and removes when the probe ends: one is left when the
// daemon stopped or was killed in the middle of a probe (a launcher
// stopped right after it started). Only this daemon's own directory is
// looked at; system mode's is the host's.
func (d *Daemon) removeProbeDirs() {
	if d.cfg.Root {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(d.cfg.Dir, "qemu", "lib", "qmp-*"))
	for _, p := range dirs {
		// Lstat: a link named like one is never followed.
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() && os.RemoveAll(p) == nil {
			d.log.Info("removed the directory of a capability probe the daemon did not finish", "path", p)
		}
	}
}

// removeSockets removes the sockets a stopped daemon left in its own
// socket directory. Called only once the process has exited.
func (d *Daemon) removeSockets(c *child) {
	prefix := c.name + "-"
	if c.name == "libvirtd" {
		prefix = "libvirt-"
	}
	var gone []string
	if ents, err := os.ReadDir(d.cfg.SocketDir()); err == nil {
		for _, e := range ents {
			if e.Type()&os.ModeSocket != 0 && strings.HasPrefix(e.Name(), prefix) {
				p := filepath.Join(d.cfg.SocketDir(), e.Name())
				if os.Remove(p) == nil {
					gone = append(gone, p)
				}
			}
		}
	}
	if len(gone) > 0 {
		d.log.Info("removed the sockets the stopped "+c.name+" left", "paths", gone)
	}
}

// removeDomainDirs removes what a daemon killed by Stop had no chance to:
// for the main daemon in session mode, the QEMU driver's per-domain runtime
// directories (QEMU's monitor and channel sockets). A daemon that stopped
// on SIGTERM keeps them: a guest it leaves running still uses them. Only
// this daemon's own directories are looked at; in system mode the driver's
// directories are libvirt's host-wide ones and stay alone.
func (d *Daemon) removeDomainDirs(c *child) {
	if c != d.main || d.cfg.Root {
		return
	}
	var gone []string
	for _, dir := range []string{"lib", filepath.Join("channel", "target")} {
		doms, _ := filepath.Glob(filepath.Join(d.cfg.Dir, "qemu", dir, "domain-*"))
		for _, p := range doms {
			// Lstat: a link planted there is removed, never followed.
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() && os.RemoveAll(p) == nil {
				gone = append(gone, p)
			}
		}
	}
	if len(gone) > 0 {
		d.log.Info("removed what the killed "+c.name+" left", "paths", gone)
	}
}

// copyXML copies the *.xml files of src that dst lacks, each atomically
// (a reader never sees half a file), and returns how many it copied.
func copyXML(src, dst string, owner *syscall.Credential) (int, error) {
	ents, err := os.ReadDir(src)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".xml") {
			continue
		}
		target := filepath.Join(dst, e.Name())
		if _, err := os.Stat(target); err == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return n, err
		}
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return n, err
		}
		tmp, err := os.CreateTemp(dst, ".seed-*")
		if err != nil {
			return n, err
		}
		_, werr := tmp.Write(data)
		cerr := tmp.Close()
		if werr == nil && cerr == nil && owner != nil {
			werr = os.Chown(tmp.Name(), int(owner.Uid), int(owner.Gid))
		}
		if werr == nil && cerr == nil {
			werr = os.Rename(tmp.Name(), target)
		}
		if werr != nil || cerr != nil {
			os.Remove(tmp.Name())
			return n, errors.Join(werr, cerr)
		}
		n++
	}
	return n, nil
}

func (d *Daemon) env() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C",
		// One malloc arena instead of one per thread that allocates:
		// measured with a booted guest, the daemon's anonymous memory
		// drops from 6.6 to 4.6 MiB. A launcher's daemon serves one
		// client, so the arenas buy no concurrency. (Worker pool
		// sizes, the admin server's and GLib's slice allocator measured
		// within 0.15 MiB: left as they are.)
		"MALLOC_ARENA_MAX=1",
	}
	if !d.cfg.Root {
		env = append(env,
			"HOME="+d.cfg.configHome(),
			"XDG_RUNTIME_DIR="+d.cfg.RuntimeDir,
			"XDG_CONFIG_HOME="+d.cfg.configHome(),
			"XDG_CACHE_HOME="+d.cfg.cacheHome(),
		)
	}
	if d.driverDir != "" {
		env = append(env, "LIBVIRT_DRIVER_DIR="+d.driverDir)
	}
	return env
}

func (d *Daemon) spawn(c *child) error {
	cmd := exec.Command(c.args[0], c.args[1:]...)
	cmd.Env = d.env()
	cmd.Dir = d.cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C goes to the launcher,
		// which shuts the guest down before it stops the daemons.
		Setpgid: true,
		// Do not outlive a launcher that is killed outright.
		Pdeathsig:  syscall.SIGTERM,
		Credential: d.cfg.Credential,
	}
	out, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	cmd.Stdout = nil
	errc := make(chan error, 1)
	d.spawns <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
	d.log.Info("started "+c.name, "pid", cmd.Process.Pid)
	go func() {
		relay(d.log, c.name, out)
		err := cmd.Wait()
		if err != nil {
			// A crash or a kill: say so, Stop or not (a clean exit on
			// SIGTERM is err == nil).
			d.log.Warn(c.name+" exited", "pid", cmd.Process.Pid, "reason", err.Error())
		} else {
			d.log.Debug(c.name+" exited", "pid", cmd.Process.Pid)
		}
		close(done)
	}()
	return nil
}

// spawner starts the daemons from one thread, locked for good: a child's
// parent-death signal follows the thread that started it, and SpawnSetup
// may have put the thread in namespaces of its own. When Stop closes
// spawns the goroutine ends and takes the thread with it, after the
// daemons are gone.
func (d *Daemon) spawner(setup chan<- error) {
	runtime.LockOSThread()
	var err error
	if d.cfg.SpawnSetup != nil {
		var undo func()
		undo, err = d.cfg.SpawnSetup()
		if undo != nil {
			defer undo()
		}
	}
	setup <- err
	if err != nil {
		return
	}
	for f := range d.spawns {
		f()
	}
}

// relay turns the daemon's log lines into our JSON log lines.
func relay(log *slog.Logger, name string, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		// "2026-11-30 09:15:05.776+0000: 9217: error : func:line : text"
		level := slog.LevelInfo
		if parts := strings.SplitN(line, ": ", 4); len(parts) == 4 {
			switch strings.TrimSpace(parts[2]) {
			case "error":
				level = slog.LevelError
			case "warning":
				level = slog.LevelWarn
			case "debug":
				level = slog.LevelDebug
			}
			line = parts[3]
		}
		if level > slog.LevelDebug && harmless(line) {
			level = slog.LevelDebug
		}
		if level >= slog.LevelError {
			// KubeVirt's log lines carry the error text under "reason".
			log.Log(context.Background(), level, "libvirt daemon reported an error", "process", name, "reason", line)
			continue
		}
		log.Log(context.Background(), level, line, "process", name)
	}
}

func (c *child) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	select {
	case <-c.done:
		return 0
	default:
		return c.cmd.Process.Pid
	}
}

func (c *child) current() (*exec.Cmd, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd, c.done
}

func (c *child) stop(ctx context.Context) error {
	cmd, done := c.current()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not stop on SIGTERM, killed", c.name)
	}
}

// supervise restarts c whenever it dies, with a backoff, until Stop.
func (d *Daemon) supervise(c *child) {
	defer d.wg.Done()
	backoff := 100 * time.Millisecond
	for {
		_, done := c.current()
		select {
		case <-d.stopping:
			return
		case <-done:
		}
		select {
		case <-d.stopping:
			return
		default:
		}
		d.log.Warn(c.name+" died, restarting", "backoff", backoff.String())
		select {
		case <-d.stopping:
			return
		case <-time.After(backoff):
		}
		started := time.Now()
		if err := d.spawn(c); err != nil {
			d.log.Error("restart "+c.name, "reason", err.Error())
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		sock := d.socketOf(c)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := waitSocket(ctx, sock, c)
		cancel()
		if err != nil {
			d.log.Error(c.name+" restarted but its socket does not answer", "reason", err.Error())
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		d.log.Info(c.name+" restarted", "took", time.Since(started).String())
		if time.Since(started) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		if c == d.main {
			select {
			case d.restarted <- struct{}{}:
			default:
			}
		}
	}
}

// waitSocket waits until path accepts a connection, or c exits. A daemon's
// socket appears some 20-60 ms after its exec; a 1 ms tick (a stat, and a
// dial only once the file exists) loses at most a millisecond of that.
func waitSocket(ctx context.Context, path string, c *child) error {
	_, done := c.current()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
				conn.Close()
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("socket %s: %w", path, ctx.Err())
		case <-done:
			return fmt.Errorf("%s exited before its socket %s answered", c.name, path)
		case <-tick.C:
		}
	}
}

// noise are messages every unprivileged daemon on a headless machine logs at
// error level although nothing is wrong for a launcher.
var noise = []string{
	"Unable to find 'dnsmasq' binary",
	"Unable to get system bus connection",
	"Unable to get session bus connection",
	"DBus not available",
	"Failed to get udev device for syspath '/sys/devices/virtual/dmi/id'",
	"Unable to open /dev/kvm",
	"End of file while reading data", // a client (our readiness probe) hung up
	"Disallowing client",             // virtlogd refusing our readiness probe as root
	"ethtool ioctl error",            // node device enumeration in a pod's network namespace
	"dmidecode",                      // no /dev/mem in a container
}

func harmless(line string) bool {
	for _, n := range noise {
		if strings.Contains(line, n) {
			return true
		}
	}
	return false
}
