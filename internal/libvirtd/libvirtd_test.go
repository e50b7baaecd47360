package libvirtd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/procfs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// testUser is the unprivileged account scripts/install-deps creates; the
// daemons run as it in session mode, as the launcher does.
func testCredential(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		// Already unprivileged: run the daemons as ourselves.
		return nil
	}
	uid, gid, err := pod.LookupUser(launchertest.TestUser)
	testenv.Need(t, "user "+launchertest.TestUser, err)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func testConfig(t *testing.T) Config {
	t.Helper()
	_, _, err := FindDaemon()
	testenv.Need(t, "the libvirt daemon", err)
	// Short paths: unix sockets are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "lvd")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	cred := testCredential(t)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	return Config{
		Dir:        filepath.Join(dir, "private", "libvirt"),
		RuntimeDir: filepath.Join(dir, "run"),
		CacheHome:  filepath.Join(dir, "private"),
		Credential: cred,
		LogFilters: os.Getenv("LVD_FILTERS"),
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func connect(t *testing.T, d *Daemon) *libvirt.Libvirt {
	t.Helper()
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.Socket()), dialers.WithLocalTimeout(2*time.Second)))
	if err := l.ConnectToURI(libvirt.ConnectURI(d.URI())); err != nil {
		t.Fatalf("connect %s: %v", d.Socket(), err)
	}
	return l
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	// A zombie is not alive (this sandbox's PID 1 does not reap orphans).
	st, err := procfs.ReadStat("/proc", pid)
	return err == nil && st.State != 'Z'
}

func TestConfigValidate(t *testing.T) {
	long := "/" + strings.Repeat("x", 100)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"relative dir", Config{Dir: "rel/libvirt", RuntimeDir: "/r"}, "absolute"},
		{"dir not libvirt", Config{Dir: "/p/other", RuntimeDir: "/r"}, "must end in /libvirt"},
		{"no runtime dir", Config{Dir: "/p/libvirt"}, "RuntimeDir"},
		{"socket too long", Config{Dir: "/p/libvirt", RuntimeDir: long}, "too long"},
		{"ok", Config{Dir: "/p/libvirt", RuntimeDir: "/r"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestConfigFiles(t *testing.T) {
	if got := (Config{}).qemuConf(); !strings.Contains(got, `stdio_handler = "file"`) {
		t.Errorf("default qemu.conf does not have QEMU write its logs itself:\n%s", got)
	}
	if got := (Config{Virtlogd: true}).qemuConf(); !strings.Contains(got, `stdio_handler = "logd"`) {
		t.Errorf("qemu.conf with Virtlogd does not use it:\n%s", got)
	}
	// libvirt 9.0: session cacheDir $XDG_CACHE_HOME/libvirt/qemu/cache,
	// system /var/cache/libvirt/qemu; the probe results in "capabilities".
	caps := []struct {
		cfg  Config
		want string
	}{
		{Config{Dir: "/p/libvirt", CacheHome: "/k"}, "/k/libvirt/qemu/cache/capabilities"},
		{Config{Dir: "/p/libvirt"}, "/p/libvirt/qemu/cache/capabilities"},
		{Config{Dir: "/p/libvirt", Root: true}, "/var/cache/libvirt/qemu/capabilities"},
	}
	for _, tt := range caps {
		if got := tt.cfg.CapabilitiesCacheDir(); got != tt.want {
			t.Errorf("CapabilitiesCacheDir of %+v = %s, want %s", tt.cfg, got, tt.want)
		}
	}
	c := Config{Dir: "/p/libvirt", RuntimeDir: "/r", LogFilters: `1:qemu "x"`}
	if got := c.daemonConf(); !strings.Contains(got, `log_filters = "1:qemu \"x\""`) || strings.Contains(got, "unix_sock_dir") {
		t.Errorf("session daemon conf:\n%s", got)
	}
	c.Root = true
	if got := c.daemonConf(); !strings.Contains(got, `unix_sock_dir = "/r/libvirt"`) {
		t.Errorf("root daemon conf lacks unix_sock_dir:\n%s", got)
	}
	if got := (Config{}).daemonConf(); !strings.Contains(got, "log_level = 3") {
		t.Errorf("quiet default missing:\n%s", got)
	}
}

// A domain with no disks: SeaBIOS finds nothing to boot and waits forever,
// which is a real, running QEMU without needing a guest image.
const idleDomain = `<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>32</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>
</domain>`

func qemuPid(t *testing.T, d *Daemon, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.cfg.SocketDir(), "qemu", "run", name+".pid"))
	if err != nil {
		t.Fatalf("qemu pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestDaemonRestartKeepsGuest starts the real daemon in session mode as the
// unprivileged user, runs a QEMU, kills the daemon with SIGKILL, and checks
// that the supervisor restarts it, the guest kept running, and the new
// daemon knows the guest.
func TestDaemonRestartKeepsGuest(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	d, err := Start(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s answers after %v", d.Kind(), time.Since(t0))
	stopped := false
	defer func() {
		if !stopped {
			d.Stop(context.Background())
		}
	}()
	if d.URI() != "qemu:///session" {
		t.Errorf("URI %q", d.URI())
	}
	l := connect(t, d)
	name := "lvd-idle"
	dom, err := l.DomainDefineXML(fmt.Sprintf(idleDomain, name))
	if err != nil {
		t.Fatalf("define: %v", err)
	}
	if err := l.DomainCreate(dom); err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() {
		// Whatever happens, do not leave the QEMU behind.
		if stopped {
			return
		}
		if l2, err := reconnect(d); err == nil {
			l2.DomainDestroy(dom)
			l2.DomainUndefine(dom)
			l2.Disconnect()
		}
	}()
	qpid := qemuPid(t, d, name)
	oldDaemon, logd := killDaemon(ctx, t, d)
	<-l.Disconnected()
	newDaemon, logd2 := d.Pids()
	if newDaemon == oldDaemon || newDaemon == 0 {
		t.Fatalf("daemon pid %d after restart (was %d)", newDaemon, oldDaemon)
	}
	if logd2 != logd {
		t.Errorf("virtlogd pid changed %d -> %d", logd, logd2)
	}
	if !alive(qpid) {
		t.Fatalf("QEMU %d died with the daemon", qpid)
	}
	l2, err := reconnect(d)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Disconnect()
	dom2, err := l2.DomainLookupByName(name)
	if err != nil {
		t.Fatalf("restarted daemon does not know the domain: %v", err)
	}
	state, _, err := l2.DomainGetState(dom2, 0)
	if err != nil || libvirt.DomainState(state) != libvirt.DomainRunning {
		t.Fatalf("state after restart %v, %v; want running", state, err)
	}
	// The new daemon may still be reconnecting to the monitor; a destroy
	// racing with that reports "not running" once QEMU is gone, which is
	// fine: what matters is that QEMU goes away.
	if err := l2.DomainDestroy(dom2); err != nil && !strings.Contains(err.Error(), "not running") {
		t.Fatalf("destroy through the new daemon: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for alive(qpid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(qpid) {
		t.Fatalf("QEMU %d still alive after destroy", qpid)
	}
	l2.DomainUndefine(dom2)

	stopCtx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer c2()
	if err := d.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, pid := range []int{newDaemon, logd} {
		if alive(pid) {
			t.Errorf("pid %d still alive after Stop", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "qemu.conf")); err != nil {
		t.Errorf("qemu.conf not written into the private dir: %v", err)
	}
}

func reconnect(d *Daemon) (*libvirt.Libvirt, error) {
	var err error
	for i := 0; i < 100; i++ {
		l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.Socket()), dialers.WithLocalTimeout(2*time.Second)))
		if err = l.ConnectToURI(libvirt.ConnectURI(d.URI())); err == nil {
			return l, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("reconnect: %w", err)
}

// TestSideBySide: two daemons in different directories do not see each
// other's domains.
func TestSideBySide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ds []*Daemon
	for i := 0; i < 2; i++ {
		d, err := Start(ctx, testConfig(t), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background())
		ds = append(ds, d)
	}
	if ds[0].Socket() == ds[1].Socket() {
		t.Fatal("same socket")
	}
	l0, l1 := connect(t, ds[0]), connect(t, ds[1])
	defer l0.Disconnect()
	defer l1.Disconnect()
	dom, err := l0.DomainDefineXML(fmt.Sprintf(idleDomain, "lvd-side"))
	if err != nil {
		t.Fatal(err)
	}
	defer l0.DomainUndefine(dom)
	if _, err := l1.DomainLookupByName("lvd-side"); err == nil {
		t.Fatal("second daemon sees the first daemon's domain")
	}
}

// TestCapsSeed: a daemon's QEMU capability probe is saved to the seed dir
// at Stop and handed to the next daemon before it starts.
func TestCapsSeed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed := t.TempDir()
	cfg := testConfig(t)
	cfg.CapsSeedDir = seed
	d, err := Start(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	l := connect(t, d)
	// Defining a domain makes the daemon probe QEMU.
	t0 := time.Now()
	dom, err := l.DomainDefineXML(fmt.Sprintf(idleDomain, "lvd-caps"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first define (cold cache): %v", time.Since(t0))
	l.DomainUndefine(dom)
	l.Disconnect()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(d.Stop(ctx))
	saved, _ := filepath.Glob(filepath.Join(seed, "*.xml"))
	if len(saved) == 0 {
		t.Fatalf("no capability file saved to %s", seed)
	}

	cfg2 := testConfig(t)
	cfg2.CapsSeedDir = seed
	d2, err := Start(ctx, cfg2, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Stop(context.Background())
	got, _ := filepath.Glob(filepath.Join(d2.CapabilitiesCacheDir(), "*.xml"))
	if len(got) != len(saved) {
		t.Fatalf("second daemon's cache has %d files, want %d", len(got), len(saved))
	}
	l2 := connect(t, d2)
	defer l2.Disconnect()
	t0 = time.Now()
	dom2, err := l2.DomainDefineXML(fmt.Sprintf(idleDomain, "lvd-caps"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first define (seeded cache): %v", time.Since(t0))
	l2.DomainUndefine(dom2)
}

// TestRootModeRefusedOutsideContainer: a launcher run
// as root on a machine that is no container must not start a system-mode
// daemon, which would share /run/libvirt and /var/lib/libvirt with the
// machine's and write /etc/libvirt/qemu.conf: Start refuses before writing
// anything, and the machine's libvirt files stay as they were.
func TestRootModeRefusedOutsideContainer(t *testing.T) {
	testenv.Root(t, "root mode is what is refused")
	t.Setenv("container", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("VIRTLAUNCHER_ALLOW_HOST_SYSTEM_MODE", "")
	if InContainer() {
		testenv.Need(t, "a machine that is no container", errors.New("/run/.containerenv exists"))
	}
	host := []string{"/etc/libvirt/qemu.conf", "/run/libvirt/common/system.token", "/run/libvirt/qemu"}
	before := map[string]string{}
	for _, p := range host {
		before[p] = describe(p)
	}
	dir := t.TempDir()
	cfg := Config{Dir: filepath.Join(dir, "libvirt"), RuntimeDir: filepath.Join(dir, "run"), Root: true}
	d, err := Start(context.Background(), cfg, testLogger(t))
	if err == nil {
		d.Stop(context.Background())
		t.Fatal("root mode started outside a container")
	}
	if !strings.Contains(err.Error(), "root mode outside a container") {
		t.Errorf("error %v, want one naming root mode outside a container", err)
	}
	for _, p := range host {
		if now := describe(p); now != before[p] {
			t.Errorf("%s changed: %s, was %s", p, now, before[p])
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("Start made %d entries in its directory before refusing", len(ents))
	}
}

// describe is a file's state: absent, or its size, mode and times.
func describe(p string) string {
	st, err := os.Lstat(p)
	if err != nil {
		return "absent"
	}
	return fmt.Sprintf("%d %v %v", st.Size(), st.Mode(), st.ModTime().UnixNano())
}

// TestStopRemovesProbeDir: a capability probe's directory the daemon left
// (stopped in the middle of a probe) is gone after Stop; a link named like
// one is not followed.
func TestStopRemovesProbeDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := testConfig(t)
	d, err := Start(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(cfg.Dir, "qemu", "lib")
	probe := filepath.Join(lib, "qmp-AbC123")
	target := t.TempDir()
	if err := os.MkdirAll(probe, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(probe, "qmp.monitor"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(lib, "qmp-link")); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(probe); !os.IsNotExist(err) {
		t.Errorf("probe directory left after Stop: %v", err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the link's target was touched: %v", err)
	}
}

// killDaemon SIGKILLs d's daemon and waits for Start's watcher to have
// restarted it; it returns the pids before the kill.
func killDaemon(ctx context.Context, t *testing.T, d *Daemon) (daemon, logd int) {
	t.Helper()
	daemon, logd = d.Pids()
	if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Restarted():
	case <-ctx.Done():
		t.Fatal("daemon was not restarted")
	}
	return daemon, logd
}

// TestStopRemovesSockets: libvirt unlinks its sockets on SIGTERM only once
// the last reference to its server is dropped; a daemon stopped with a
// client call in flight (seen once in CI: a launcher SIGTERMed a few ms
// into its first Sync) exits leaving them. Stop then removes them. The race
// itself does not reproduce on demand, so a socket of the daemon's name
// that the daemon does not unlink stands in for one it failed to.
func TestStopRemovesSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := testConfig(t)
	d, err := Start(ctx, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := reconnect(d)
	if err != nil {
		d.Stop(context.Background())
		t.Fatal(err)
	}
	defer l.Disconnect()
	// A launcher is subscribed to domain events all the time.
	if _, err := l.LifecycleEvents(ctx); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(cfg.SocketDir(), "libvirt-stale-sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(cfg.SocketDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type()&os.ModeSocket != 0 {
			t.Errorf("socket left after Stop: %s", filepath.Join(cfg.SocketDir(), e.Name()))
		}
	}
}
