package pod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// NetworkConfig says where a pod network is made and for which VMI.
type NetworkConfig struct {
	// Dir holds the pod network's resolv.conf (podnet.Config.Dir): a
	// directory only root can change.
	Dir string
	// Name is the namespaces' suffix (podnet.NewName), chosen beforehand
	// by a caller that records it before the namespaces exist; random when
	// empty.
	Name   string
	NoIPv6 bool
	// VMI is the VMI as at its first Sync: its masquerade and bridge
	// interfaces are wired.
	VMI *v1.VirtualMachineInstance
	// Privileged configures virt-handler's privileged phase: the taps'
	// owner, where the vif caches and the restore state go.
	Privileged netsetup.PrivilegedConfig
	Log        *slog.Logger
}

// Network is a pod's network on a plain machine: what the CNI plugins,
// Multus and virt-handler's privileged phase make in a cluster. Its pod
// namespace's eth0 reaches a second namespace that plays the rest of the
// world (podnet); every secondary (Multus-style) network of the VMI is one
// more pod interface towards that namespace, on a /24 of its own
// (SecondaryNet); the privileged phase then wires the VMI's interfaces in
// the pod namespace.
type Network struct {
	*podnet.Pod
	// Plan is the VMI's wired interfaces, as planned at the start.
	Plan []plan.Iface
	cfg  NetworkConfig
	vmi  *v1.VirtualMachineInstance // the VMI as last wired
	up   bool                       // privileged phase done: Close undoes it
	// closed: Close has removed the namespaces; a second Close does
	// nothing.
	closed bool
	// extra counts the secondary pod interfaces made (SecondaryNet's i).
	extra int
}

func hasPasst(ifaces []plan.Iface) bool {
	return slices.ContainsFunc(ifaces, func(it plan.Iface) bool { return it.Binding == plan.BindingPasst })
}

// PasstResolver is the pod's resolver address when the VMI has a passt
// interface: Kubernetes' usual cluster DNS service address.
var PasstResolver = netip.MustParseAddr("10.96.0.10")

// SecondaryNet is the pod's and the outside's address of the i-th
// secondary pod interface: 192.168.67+i.2 and .1, /24.
func SecondaryNet(i int) (pod4, outside4 netip.Prefix) {
	return netip.MustParsePrefix(fmt.Sprintf("192.168.%d.2/24", 67+i)), netip.MustParsePrefix(fmt.Sprintf("192.168.%d.1/24", 67+i))
}

// NewNetwork makes the pod network for cfg.VMI and runs the privileged
// phase in it. It returns nil, and makes nothing, when the VMI has no
// masquerade or bridge interface (nothing of the pod's network reaches the
// guest then). On error nothing is left.
func NewNetwork(ctx context.Context, cfg NetworkConfig) (*Network, error) {
	ifaces, err := plan.PlanFor(cfg.VMI, cfg.Privileged.Plan)
	if err != nil {
		return nil, err
	}
	if len(ifaces) == 0 {
		return nil, nil
	}
	pc := podnet.Config{Dir: cfg.Dir, Name: cfg.Name, NoIPv6: cfg.NoIPv6}
	if hasPasst(ifaces) {
		// passt takes the guest's traffic to the gateway to the pod's own
		// loopback, so a resolver at the gateway would be out of the
		// guest's reach: it gets an address of its own, as a cluster's
		// DNS service has.
		pc.Resolver = PasstResolver
	}
	p, err := podnet.New(pc)
	if err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	n := &Network{Pod: p, Plan: ifaces, cfg: cfg, vmi: cfg.VMI}
	for _, ifc := range ifaces {
		if ifc.PodIface == "eth0" { // podnet.New made it
			continue
		}
		pod4, out4 := SecondaryNet(n.extra)
		n.extra++
		if err := p.AddInterface(ifc.PodIface, pod4, out4); err != nil {
			return nil, errors.Join(fmt.Errorf("pod interface %s: %w", ifc.PodIface, err), n.Close())
		}
	}
	if err := netsetup.SetupPrivileged(ctx, p.NS, cfg.VMI, cfg.Privileged, cfg.Log); err != nil {
		// SetupPrivileged leaves nothing of its own on error.
		return nil, errors.Join(fmt.Errorf("network privileged phase: %w", err), n.Close())
	}
	n.up = true
	return n, nil
}

// Plug does for an interface plugged into the running VM what Multus and
// virt-handler do: a new secondary pod interface, then the privileged
// phase for next, the VMI with the interface, which wires only what is
// new. It returns the pod interface and its two ends' addresses; nothing
// is left when it fails.
func (n *Network) Plug(ctx context.Context, next *v1.VirtualMachineInstance, name string) (podIface string, pod4, outside4 netip.Prefix, err error) {
	ifaces, err := plan.PlanFor(next, n.cfg.Privileged.Plan)
	if err != nil {
		return "", netip.Prefix{}, netip.Prefix{}, err
	}
	for _, it := range ifaces {
		if it.Name == name {
			podIface = it.PodIface
		}
	}
	if podIface == "" {
		return "", netip.Prefix{}, netip.Prefix{}, fmt.Errorf("interface %s: not a bridge or masquerade interface of the VM", name)
	}
	if pod4, outside4, err = n.AddSecondary(podIface); err != nil {
		return "", netip.Prefix{}, netip.Prefix{}, err
	}
	if err := netsetup.SetupPrivileged(ctx, n.NS, next, n.cfg.Privileged, n.cfg.Log); err != nil {
		return "", netip.Prefix{}, netip.Prefix{}, errors.Join(fmt.Errorf("network privileged phase: %w", err), n.RemoveInterface(podIface))
	}
	n.vmi = next
	return podIface, pod4, outside4, nil
}

// AddSecondary does Multus's part of a plug alone: a new secondary pod
// interface podIface on a /24 of its own (SecondaryNet), whose addresses
// it returns. Plug adds the privileged phase; a binding plugin's CNI does
// its own.
func (n *Network) AddSecondary(podIface string) (pod4, outside4 netip.Prefix, err error) {
	pod4, outside4 = SecondaryNet(n.extra)
	if err := n.AddInterface(podIface, pod4, outside4); err != nil {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("pod interface %s: %w", podIface, err)
	}
	n.extra++
	return pod4, outside4, nil
}

// Unplug undoes Plug for interface name: prev is the VMI before the
// unplug (where the interface is not absent yet), next the one after,
// which Close tears down from then on.
func (n *Network) Unplug(ctx context.Context, prev, next *v1.VirtualMachineInstance, name, podIface string) error {
	err := errors.Join(netsetup.TeardownInterface(ctx, n.NS, prev, name, n.cfg.Privileged), n.RemoveInterface(podIface))
	if err == nil {
		n.vmi = next
	}
	return err
}

// Close undoes the privileged phase for the VMI as last wired and removes
// the namespaces.
func (n *Network) Close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	if n.up {
		// Its own deadline: Close runs when the run's context has ended.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := netsetup.TeardownPrivileged(ctx, n.NS, n.vmi, n.cfg.Privileged, n.cfg.Log); err != nil {
			errs = append(errs, fmt.Errorf("network teardown: %w", err))
		}
		n.up = false
	}
	if err := n.Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove pod network: %w", err))
	}
	return errors.Join(errs...)
}
