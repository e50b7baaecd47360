package launchertest

// The pod's network (Options.Network): its namespaces, virt-handler's
// privileged phase, and reaching the pod from outside.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// networkConfig is the pod's network (internal/pod) for the pod's VMI, the
// privileged phase included. It is made before the hand-over, which gives
// the vif caches it writes to the launcher's user; the restore state stays
// in the pod's directory, root's. Closed at the end of cleanup, after the
// pod's processes.
func (p *Pod) networkConfig() *pod.NetworkConfig {
	t := p.T
	t.Helper()
	v, err := vmiLoad(p.VMIYAML(p.Name))
	if err != nil {
		t.Fatal(err)
	}
	v.Status.Phase = v1.Scheduled // as at the first Sync
	cred := p.Env.Cred
	priv := netsetup.PrivilegedConfig{QemuUID: int(cred.Uid), QemuGID: int(cred.Gid),
		CacheDir: p.Layout.PrivateDir, StateDir: p.Dir}
	if p.opts.NetworkPlugin != "" {
		priv.Plan.DomainAttachments = p.DomainAttachments()
	}
	return &pod.NetworkConfig{Dir: p.Dir, NoIPv6: true, VMI: v, Privileged: priv}
}

// DomainAttachments is what virt-handler sends as the Sync's
// InterfaceDomainAttachment for the pod's VMI: the pod network's
// interface attached as a tap with Options.NetworkPlugin, else nothing.
func (p *Pod) DomainAttachments() map[string]string {
	if p.opts.NetworkPlugin == "" {
		return nil
	}
	return map[string]string{"default": "tap"}
}

// InPodNetwork runs fn with the calling thread in the pod's network
// namespace (Options.Network), as a CNI plugin runs.
func (p *Pod) InPodNetwork(fn func() error) error {
	if p.net == nil {
		return fmt.Errorf("the pod has no network (Options.Network)")
	}
	return plan.InNS(p.net.NS, fn)
}

// PlugNetwork does for a NIC hotplug what Multus and virt-handler do
// before the Sync (Options.Network): a secondary pod interface for
// interface name of v, the VMI with the new interface, and the privileged
// phase for v. It returns the pod interface, its address and the address
// of its other end, in the outside namespace.
func (p *Pod) PlugNetwork(v *v1.VirtualMachineInstance, name string) (podIface string, pod4, outside4 netip.Prefix) {
	p.T.Helper()
	if p.net == nil {
		p.T.Fatal("the pod has no network (Options.Network)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	podIface, pod4, outside4, err := p.net.Plug(ctx, v, name)
	if err != nil {
		p.T.Fatal(err)
	}
	return podIface, pod4, outside4
}

// PlugPodInterface does Multus's part of a NIC hotplug alone
// (Options.Network): the secondary pod interface, KubeVirt's hashed name
// for network name, which it returns; a binding plugin's CNI (the test)
// does the rest. The pod network's close removes it.
func (p *Pod) PlugPodInterface(name string) string {
	p.T.Helper()
	if p.net == nil {
		p.T.Fatal("the pod has no network (Options.Network)")
	}
	podIface := plan.HashedPodIfaceName(name)
	if _, _, err := p.net.AddSecondary(podIface); err != nil {
		p.T.Fatal(err)
	}
	return podIface
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
