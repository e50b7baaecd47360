package launchertest

// The pod's network (Options.Network): its namespaces, virt-handler's
// privileged phase, and reaching the pod from outside.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// network makes the pod's network namespace and runs the privileged phase
// for the VMI in it; the caches it writes to the private dir are handed to
// the launcher's user. Removed at cleanup.
func (p *Pod) network() *podnet.Pod {
	t := p.T
	t.Helper()
	pn, err := podnet.New(podnet.Config{Dir: p.Dir, NoIPv6: true})
	if err != nil {
		os.RemoveAll(p.Dir)
		t.Fatalf("pod network: %v", err)
	}
	v, err := vmiLoad(p.VMIYAML(p.Name))
	if err == nil {
		v.Status.Phase = v1.Scheduled // as at the first Sync
	}
	if err != nil {
		pn.Remove()
		os.RemoveAll(p.Dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pn.Remove(); err != nil {
			t.Errorf("remove pod network: %v", err)
		}
	})
	Must(t, os.MkdirAll(p.Layout.PrivateDir, 0o700))
	p.privileged(pn, v)
	return pn
}

// privileged runs virt-handler's privileged network phase for v in the
// pod's namespace (torn down at cleanup, before the namespace goes) and
// hands the caches it wrote to the launcher's user.
func (p *Pod) privileged(pn *podnet.Pod, v *v1.VirtualMachineInstance) {
	t := p.T
	t.Helper()
	cred := p.Env.Cred
	cfg := netsetup.PrivilegedConfig{QemuUID: int(cred.Uid), QemuGID: int(cred.Gid), CacheDir: p.Layout.PrivateDir}
	t.Cleanup(func() {
		if err := netsetup.TeardownPrivileged(context.Background(), pn.NS, v, cfg, nil); err != nil {
			t.Errorf("network teardown: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := netsetup.SetupPrivileged(ctx, pn.NS, v, cfg, nil); err != nil {
		t.Fatalf("network privileged phase: %v", err)
	}
	Must(t, filepath.Walk(p.Layout.PrivateDir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	}))
}

// PlugNetwork does for a NIC hotplug what Multus and virt-handler do
// before the Sync (Options.Network): a secondary pod interface named
// podIface (pod4 on it, outside4 at its other end in the outside
// namespace), then the privileged phase for v, the VMI with the new
// interface.
func (p *Pod) PlugNetwork(v *v1.VirtualMachineInstance, podIface string, pod4, outside4 netip.Prefix) {
	p.T.Helper()
	if p.net == nil {
		p.T.Fatal("the pod has no network (Options.Network)")
	}
	if err := p.net.AddInterface(podIface, pod4, outside4); err != nil {
		p.T.Fatalf("pod interface %s: %v", podIface, err)
	}
	p.privileged(p.net, v)
}

// vmiLoad parses and defaults the manifest as virt-api would have.
func vmiLoad(yaml string) (*v1.VirtualMachineInstance, error) {
	v, err := vmi.Load([]byte(yaml), vmi.Options{})
	if err != nil {
		return nil, fmt.Errorf("load test VMI: %w", err)
	}
	return v, nil
}

// PodAddress is the pod's IPv4 address on its network (Options.Network),
// where masquerade forwards the guest's ports.
func (p *Pod) PodAddress() string {
	p.T.Helper()
	if p.net == nil {
		p.T.Fatal("the pod has no network (Options.Network)")
	}
	return p.net.Pod4.Addr().String()
}

// DialOutside connects to addr from the pod network's outside, as a
// client elsewhere in the cluster would (Options.Network).
func (p *Pod) DialOutside(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.net == nil {
		return nil, fmt.Errorf("the pod has no network (Options.Network)")
	}
	var conn net.Conn
	var derr error
	err := plan.InNS(p.net.Outside, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		conn, derr = d.DialContext(ctx, network, addr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return conn, derr
}
