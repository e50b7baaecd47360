// Package hooks runs KubeVirt hook sidecars against the real launcher pod
// (internal/launchertest): the monitor and launcher as user virtlauncher,
// their libvirt daemon, QEMU and the test guest, with test/hooksidecar as
// the sidecar container, listening in its own directory of the pod's hooks
// volume as virt-controller mounts it.
package hooks

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

var env launchertest.Env

func TestMain(m *testing.M) {
	os.Exit(launchertest.Main(m, &env, "vl-hook-", "./test/hooksidecar"))
}

const bootTimeout = 90 * time.Second

// sidecar is one running test/hooksidecar.
type sidecar struct {
	cmd    *exec.Cmd
	log    *testenv.SyncBuffer
	exited chan struct{}
}

// startSidecar runs the sidecar as the launcher's user in
// <hooks dir>/<sub>, the directory virt-controller mounts as sidecar i's
// /var/run/kubevirt-hooks (sub is hook-sidecar-<i>).
func startSidecar(t *testing.T, p *launchertest.Pod, sub string, args ...string) *sidecar {
	t.Helper()
	dir := filepath.Join(p.Layout.HooksDir, sub)
	launchertest.Must(t, os.MkdirAll(dir, 0o755))
	launchertest.Must(t, os.Chown(dir, int(env.Cred.Uid), int(env.Cred.Gid)))
	s := &sidecar{log: &testenv.SyncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(filepath.Join(env.BinDir, "hooksidecar"), append([]string{"--dir", dir}, args...)...)
	s.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: env.Cred, Setpgid: true}
	launchertest.Must(t, s.cmd.Start())
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		if t.Failed() {
			t.Logf("sidecar %s output:\n%s", sub, s.log.String())
		}
	})
	return s
}

// stop ends the sidecar container (as the pod's deletion would) and waits
// for it.
func (s *sidecar) stop(t *testing.T) {
	t.Helper()
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("sidecar ignores SIGTERM:\n%s", s.log.String())
	}
}

// stopGracefully ends the launcher as the kubelet does (SIGTERM): the
// guest powers off and the launcher exits 0.
func stopGracefully(t *testing.T, p *launchertest.Pod) {
	t.Helper()
	p.Signal(syscall.SIGTERM)
	p.WaitConsole(testguest.MarkerPowerOff, 60*time.Second)
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0:\n%s", code, p.Stderr.String())
	}
}

// makeHooksDir creates the pod's hooks volume (root's, as kubelet makes
// an emptyDir).
func makeHooksDir(t *testing.T, p *launchertest.Pod) {
	t.Helper()
	launchertest.Must(t, os.MkdirAll(p.Layout.HooksDir, 0o755))
}

// hookedVMI is the pod's test VMI with the annotations a user writes:
// the sidecar list (read by virt-controller only) and the SMBIOS value
// the sidecar applies.
func hookedVMI(t *testing.T, p *launchertest.Pod, token, manufacturer string) *v1.VirtualMachineInstance {
	t.Helper()
	y := p.VMIYAML(token)
	annotations := "metadata:\n  annotations:\n" +
		"    hooks.kubevirt.io/hookSidecars: '[{\"args\": [\"--version\", \"v1alpha3\"], \"image\": \"registry.example/hooksidecar:v1\"}]'\n" +
		"    smbios.vm.kubevirt.io/baseBoardManufacturer: " + manufacturer + "\n"
	if !strings.Contains(y, "metadata:\n") {
		t.Fatalf("test VMI has no metadata:\n%s", y)
	}
	y = strings.Replace(y, "metadata:\n", annotations, 1)
	v, err := vmi.Load([]byte(y), vmi.Options{})
	if err != nil {
		t.Fatalf("load annotated VMI: %v\n%s", err, y)
	}
	return v
}

// TestSidecarChangesDomainAndCloudInit: the launcher waits for its sidecar
// before anything else (not ready meanwhile); the sidecar's OnDefineDomain
// (SMBIOS base board manufacturer from the VMI's annotation) is in the
// defined domain and seen by the guest, its PreCloudInitIso line is in the
// user data and runs. Offering v1alpha2 and v1alpha3, the sidecar is
// spoken to in v1alpha3 and, once QEMU is gone, told to shut down; a
// v1alpha2-only sidecar (as in KubeVirt's example manifests) gets the same
// callbacks in v1alpha2 and no Shutdown. Nothing is left behind.
func TestSidecarChangesDomainAndCloudInit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ offer, want string }{
		{"v1alpha2,v1alpha3", "v1alpha3"},
		{"v1alpha2", "v1alpha2"},
	} {
		t.Run(c.want, func(t *testing.T) {
			t.Parallel()
			sidecarChangesDomain(t, c.offer, c.want)
		})
	}
}

func sidecarChangesDomain(t *testing.T, offer, want string) {
	p := env.NewDeferred(t, "hooked", launchertest.Options{ExtraArgs: []string{"--hook-sidecars", "1"}})
	// The guest prints its console's user data too: these lines spell
	// their markers in two pieces so that only their output holds them.
	p.ExtraUserData = []string{`echo "HOOK""-SMBIOS $(cat /sys/class/dmi/id/board_vendor)"`}
	makeHooksDir(t, p)
	p.Start()

	// Without its sidecar the launcher waits and is not ready.
	time.Sleep(1500 * time.Millisecond)
	if !p.Running() {
		t.Fatalf("launcher exited while waiting for its sidecar:\n%s", p.Stderr.String())
	}
	if _, err := os.Stat(p.Layout.ReadySocket()); err == nil {
		t.Fatal("launcher ready before its hook sidecar appeared")
	}
	s := startSidecar(t, p, "hook-sidecar-0", "--version", offer,
		"--user-data-append", `echo "HOOK""-USERDATA applied by sidecar"`)
	p.WaitReady(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := hookedVMI(t, p, "hook-5e1d", "VL Hook Test")
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain: exists=%v err=%v", exists, err)
	}
	if si := d.Spec.SysInfo; si == nil || len(si.BaseBoard) != 1 || si.BaseBoard[0].Name != "manufacturer" || si.BaseBoard[0].Value != "VL Hook Test" {
		t.Errorf("defined domain's SMBIOS base board: %+v, want manufacturer VL Hook Test", si)
	}

	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	out := p.Console()
	if got, _ := testguest.FindMarker(out, "HOOK-SMBIOS"); got != "VL Hook Test" {
		t.Errorf("guest sees board vendor %q, want %q; console:\n%s", got, "VL Hook Test", out)
	}
	if got, _ := testguest.FindMarker(out, "HOOK-USERDATA"); got != "applied by sidecar" {
		t.Errorf("sidecar's user-data line did not run (%q); console:\n%s", got, out)
	}
	if ud, _ := testguest.Between(out, testguest.MarkerUserDataBegin, testguest.MarkerUserDataEnd); !strings.Contains(ud, "token hook-5e1d") || !strings.HasSuffix(strings.TrimSpace(ud), `echo "HOOK""-USERDATA applied by sidecar"`) {
		t.Errorf("user data on the ISO:\n%s", ud)
	}
	if rc, _ := testguest.FindMarker(out, testguest.MarkerUserDataRan); rc != "rc=0" {
		t.Errorf("user-data ran: %q", rc)
	}
	for _, w := range []string{"hooksidecar: Info", "hooksidecar: PreCloudInitIso " + want, "hooksidecar: OnDefineDomain " + want} {
		if !strings.Contains(s.log.String(), w) {
			t.Errorf("sidecar log lacks %q:\n%s", w, s.log.String())
		}
	}

	stopGracefully(t, p)
	if want == "v1alpha3" {
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("sidecar still running after the launcher ended:\n%s", s.log.String())
		}
		if !strings.Contains(s.log.String(), "hooksidecar: Shutdown v1alpha3") || !s.cmd.ProcessState.Success() {
			t.Errorf("sidecar was not shut down through the protocol (%v):\n%s", s.cmd.ProcessState, s.log.String())
		}
	} else {
		if strings.Contains(s.log.String(), "Shutdown") {
			t.Errorf("a %s sidecar got Shutdown:\n%s", want, s.log.String())
		}
		s.stop(t)
	}
	p.AssertNothingLeft()
}

// TestSignalWhileWaiting: SIGTERM while the launcher waits for its
// sidecars ends it at once with status 0 (no domain was ever defined).
func TestSignalWhileWaiting(t *testing.T) {
	t.Parallel()
	p := env.NewDeferred(t, "sigwait", launchertest.Options{ExtraArgs: []string{"--hook-sidecars", "1"}})
	makeHooksDir(t, p)
	p.Start()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Stderr.String(), "waiting for hook sidecars") {
		if time.Now().After(deadline) || !p.Running() {
			t.Fatalf("launcher not waiting for its sidecar:\n%s", p.Stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(10 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0:\n%s", code, p.Stderr.String())
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("SIGTERM -> exit took %v", d)
	}
	if !strings.Contains(p.Stderr.String(), "signal before the hook sidecars were collected") {
		t.Errorf("log:\n%s", p.Stderr.String())
	}
	p.AssertNothingLeft()
}

// TestSidecarNeverAppears: the wait is bounded by --qemu-timeout; the
// launcher exits with the fatal status, naming the directory, before it
// starts anything.
func TestSidecarNeverAppears(t *testing.T) {
	t.Parallel()
	p := env.NewDeferred(t, "nohook", launchertest.Options{QemuTimeout: 3 * time.Second, ExtraArgs: []string{"--hook-sidecars", "2"}})
	makeHooksDir(t, p)
	// One sidecar comes, the second never does.
	s := startSidecar(t, p, "hook-sidecar-0")
	t0 := time.Now()
	p.Start()
	if code := p.ExitCode(30 * time.Second); code != 2 {
		t.Fatalf("exit status %d, want 2:\n%s", code, p.Stderr.String())
	}
	t.Logf("launcher gave up after %v", time.Since(t0))
	log := p.Stderr.String()
	want := "hook sidecars: 1 of 2 found under " + p.Layout.HooksDir
	if !strings.Contains(log, want) || !strings.Contains(log, filepath.Join(p.Layout.HooksDir, "hook-sidecar-0", "vl-hook.sock")) {
		t.Errorf("log lacks %q and the found socket:\n%s", want, log)
	}
	if strings.Contains(log, "libvirt daemons up") {
		t.Errorf("libvirt was started although the sidecars were missing:\n%s", log)
	}
	if _, err := os.Stat(p.Layout.ReadySocket()); err == nil {
		t.Error("launcher-sock left behind")
	}
	s.stop(t)
	p.AssertNothingLeft()
}

// TestSidecarWithoutSupportedVersion: a sidecar offering no version the
// launcher speaks is a fatal start-up error naming its socket.
func TestSidecarWithoutSupportedVersion(t *testing.T) {
	t.Parallel()
	p := env.NewDeferred(t, "badver", launchertest.Options{ExtraArgs: []string{"--hook-sidecars", "1"}})
	makeHooksDir(t, p)
	s := startSidecar(t, p, "hook-sidecar-0", "--version", "v1beta1")
	p.Start()
	if code := p.ExitCode(30 * time.Second); code != 2 {
		t.Fatalf("exit status %d, want 2:\n%s", code, p.Stderr.String())
	}
	log := p.Stderr.String()
	if !strings.Contains(log, `offers Callbacks versions [\"v1beta1\"]`) || !strings.Contains(log, "hook-sidecar-0/vl-hook.sock") {
		t.Errorf("log does not name the sidecar and its versions:\n%s", log)
	}
	s.stop(t)
	p.AssertNothingLeft()
}

// TestSidecarErrorFailsSync: a callback's error fails the Sync with a
// message naming the sidecar; no domain is defined and no QEMU runs; the
// launcher stays up for the handler's next Sync and ends cleanly on
// SIGTERM.
func TestSidecarErrorFailsSync(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"OnDefineDomain", "PreCloudInitIso"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			p := env.NewDeferred(t, "hookerr", launchertest.Options{ExtraArgs: []string{"--hook-sidecars", "1"}})
			makeHooksDir(t, p)
			s := startSidecar(t, p, "hook-sidecar-0", "--user-data-append", "echo x", "--fail", point)
			p.Start()
			p.WaitReady(30 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := p.Client(ctx)
			err := c.Sync(ctx, hookedVMI(t, p, "err", "X"), nil)
			if err == nil || !strings.Contains(err.Error(), `hook sidecar "vl-hook"`) || !strings.Contains(err.Error(), point+" failing as asked") {
				t.Fatalf("Sync error %v, want one naming the sidecar and its %s error", err, point)
			}
			if _, exists, err := c.GetDomain(ctx); err != nil || exists {
				t.Errorf("after the failed Sync: domain exists=%v err=%v", exists, err)
			}
			// (A QEMU may run briefly: the daemon's capability probe.)
			pidFile := filepath.Join(p.Layout.LibvirtRunDir, "libvirt", "qemu", "run", p.DomainName()+".pid")
			if _, err := os.Stat(pidFile); err == nil {
				t.Errorf("the guest's QEMU runs after the failed Sync (%s)", pidFile)
			}
			p.Signal(syscall.SIGTERM)
			if code := p.ExitCode(30 * time.Second); code != 0 {
				t.Fatalf("exit status %d, want 0:\n%s", code, p.Stderr.String())
			}
			s.stop(t)
			p.AssertNothingLeft()
		})
	}
}

// TestBindingPluginSidecar: an interface bound to a network binding plugin
// without a domain attachment type is left out of the domain the launcher
// converts, and the plugin's sidecar (the test sidecar playing KubeVirt's
// slirp plugin: a user-mode interface with the spec's MAC) adds it in
// OnDefineDomain, as in KubeVirt v1.9. The running domain has the
// sidecar's interface and the guest has the NIC and leases an address
// from it (QEMU's user network's DHCP).
func TestBindingPluginSidecar(t *testing.T) {
	t.Parallel()
	const mac = "02:00:00:12:34:56"
	p := env.NewDeferred(t, "plugin", launchertest.Options{ExtraArgs: []string{"--hook-sidecars", "1"}})
	p.ExtraUserData = []string{
		`echo "PLUG""-MAC $(cat /sys/class/net/eth0/address)"`,
		`ip link set eth0 up; echo "PLUG""-LEASE $(udhcpc -i eth0 -n -q -t 10 -T 2 -s /bin/true 2>&1 | grep -o 'lease of [0-9.]*')"`,
	}
	makeHooksDir(t, p)
	p.Start()
	s := startSidecar(t, p, "hook-sidecar-0", "--version", "v1alpha3", "--plugin", "slirp")
	p.WaitReady(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v, err := vmi.Load([]byte(p.VMIYAML("plug-7a1c")), vmi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "plug", MacAddress: mac, Binding: &v1.PluginBinding{Name: "slirp"}}}
	v.Spec.Networks = []v1.Network{{Name: "plug", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	if err := c.Sync(ctx, v, nil); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain: exists=%v err=%v", exists, err)
	}
	if ifs := d.Spec.Devices.Interfaces; len(ifs) != 1 || ifs[0].Type != "user" || ifs[0].Alias == nil || ifs[0].Alias.Name != "plug" || !ifs[0].Alias.UserDefined ||
		ifs[0].MAC == nil || ifs[0].MAC.MAC != mac {
		t.Errorf("domain interfaces %+v, want the sidecar's user-mode interface with user alias plug and MAC %s", ifs, mac)
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	p.WaitConsole("PLUG-LEASE", 60*time.Second)
	out := p.Console()
	if got, _ := testguest.FindMarker(out, "PLUG-MAC"); got != mac {
		t.Errorf("guest's eth0 MAC %q, want %s; console:\n%s", got, mac, out)
	}
	if got, _ := testguest.FindMarker(out, "PLUG-LEASE"); got != "lease of 10.0.2.15" {
		t.Errorf("guest's lease on the plugin's interface: %q, want lease of 10.0.2.15; console:\n%s", got, out)
	}
	if !strings.Contains(s.log.String(), "hooksidecar: added interface plug of plugin slirp") {
		t.Errorf("sidecar did not add the interface:\n%s", s.log.String())
	}
	stopGracefully(t, p)
	p.AssertNothingLeft()
}
