package pod

import (
	v1 "kubevirt.io/api/core/v1"

	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// TestSpecCommand: the one renderer of a launcher pod's monitor. Each
// spec's command line, read back by the monitor's parser and then the
// launcher's, is the VMI's flags with the pod's own set: the directories
// where the launcher sees them (FixedRoot), unprivileged, emulation as
// asked, the network's resolv.conf; the process runs as the pod's user in
// the pod's directory, with CAP_NET_BIND_SERVICE only with a network.
func TestSpecCommand(t *testing.T) {
	d, err := safefs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	base := launcherflags.Defaults()
	base.Name, base.Namespace, base.UID = "vm", "ns", "u-1"
	base.QemuCapsCache = "/caps"
	user := &syscall.Credential{Uid: 5, Gid: 6}
	net := &Network{Pod: &podnet.Pod{ResolvConf: "/w/resolv.conf.x"}}
	for _, c := range []struct {
		name    string
		change  func(*Spec)
		net     *Network
		want    func(*launcherflags.Options)
		network bool
	}{
		{name: "plain", want: func(*launcherflags.Options) {}},
		{name: "emulate", change: func(s *Spec) { s.Emulate = true }, want: func(o *launcherflags.Options) { o.ForceEmulation = true }},
		{name: "fixed root", change: func(s *Spec) { s.FixedRoot = "/fixed" }, want: func(o *launcherflags.Options) { o.SetLayout(layout.Under("/fixed")) }},
		{name: "network", net: net, network: true, want: func(o *launcherflags.Options) { o.ResolvConf = net.ResolvConf }},
		{name: "extra", change: func(s *Spec) { s.Extra = []string{"--qemu-timeout=7m"} }, want: func(o *launcherflags.Options) { o.QemuTimeout = 7 * 60e9 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Spec{Dir: d, Layout: layout.Under(d.Path()), User: user, Monitor: "/b/virt-launcher-monitor", Launcher: "/b/virt-launcher", Flags: base, Env: []string{"PCI_RESOURCE_X=0000:01:00.0"}}
			if c.change != nil {
				c.change(&s)
			}
			cmd := s.Command(c.net)
			cfg, got, env := readBack(t, cmd)
			want := base
			want.SetLayout(layout.Under(d.Path()))
			want.RunAsNonroot, want.AllowEmulation = true, true
			c.want(&want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("the launcher gets\n%+v\nwant\n%+v", *got, want)
			}
			if cmd.Path != s.Monitor || cfg.LauncherPath != s.Launcher || env["PCI_RESOURCE_X"] != "0000:01:00.0" {
				t.Errorf("monitor %q, launcher %q, env %q", cmd.Path, cfg.LauncherPath, cmd.Env)
			}
			a := cmd.SysProcAttr
			if a.Credential != user || cmd.Dir != d.Path() || slices.Equal(a.AmbientCaps, []uintptr{monitor.CapNetBindService}) != c.network {
				t.Errorf("credential %v, dir %q, ambient caps %v", a.Credential, cmd.Dir, a.AmbientCaps)
			}
		})
	}
}

// TestLaunchUndoes: a launch that fails midway leaves nothing it made: not
// the pod directories (with what Fill put there), not the pod user's
// passwd and group, not the network's namespaces, and the pod's directory is root's and 0700 again. It fails
// at each step in turn, the last being the start of a monitor binary that
// does not exist.
func TestLaunchUndoes(t *testing.T) {
	testenv.Root(t, "a pod network and a hand-over need root")
	testenv.Programs(t, "ip")
	boom := errors.New("boom")
	for _, at := range []string{"fill", "networked", "handed over", "start"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			d, err := safefs.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			fail := func(step string) error {
				if step == at {
					return boom
				}
				return nil
			}
			var net *Network
			s := Spec{
				Dir: d, Layout: layout.Under(dir), User: &syscall.Credential{Uid: 65534, Gid: 65534}, OwnPasswd: true,
				Monitor: dir + "/no-such-monitor", Launcher: dir + "/no-such-launcher",
				Network: &NetworkConfig{Dir: dir, VMI: masqueradeVMI(), Privileged: netsetup.PrivilegedConfig{
					QemuUID: 65534, QemuGID: 65534, CacheDir: layout.Under(dir).PrivateDir, StateDir: dir}},
				Fill: func() error {
					rel, err := filepath.Rel(dir, layout.Under(dir).PrivateDir)
					if err != nil {
						return err
					}
					if err := d.WriteFile(rel+"/filled", []byte("x"), 0o644); err != nil {
						return err
					}
					return fail("fill")
				},
				Networked:  func(n *Network) error { net = n; return fail("networked") },
				HandedOver: func() error { return fail("handed over") },
			}
			p, err := s.Launch(context.Background())
			if err == nil {
				p.Process.Err()
				t.Fatalf("launch failing at %s succeeded", at)
			}
			if at != "start" && !errors.Is(err, boom) {
				t.Errorf("launch failing at %s: %v, want boom", at, err)
			}
			if at != "fill" && net == nil {
				t.Fatalf("no network made before %s", at)
			}
			if net != nil {
				for _, ns := range []string{net.NSName, net.OutsideName} {
					if _, err := os.Stat("/run/netns/" + ns); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("namespace %s left (%v)", ns, err)
					}
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
				t.Errorf("left in the pod's directory: %v", left)
			}
			if uid, gid, mode := owner(t, dir); uid != 0 || gid != 0 || mode.Perm() != 0o700 {
				t.Errorf("pod directory %d:%d %v, want root's and 0700", uid, gid, mode)
			}
		})
	}
}

// masqueradeVMI is a VMI with one masquerade interface on the pod network.
func masqueradeVMI() *v1.VirtualMachineInstance {
	v := &v1.VirtualMachineInstance{}
	v.Name, v.Namespace = "undo", "default"
	v.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	v.Spec.Domain.Devices.Interfaces = []v1.Interface{{
		Name:                   "default",
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}},
	}}
	return v
}
