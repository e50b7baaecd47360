package standalone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// network is the standalone stand-in for a pod's network: a "pod" namespace
// whose eth0 reaches a second namespace playing the outside world, wired
// for the VMI's interfaces by the privileged phase.
type network struct {
	r    *runner
	pod  *podnet.Pod
	plan []plan.Iface
	up   bool // privileged phase done: teardown must undo it
	// extra counts the secondary pod interfaces made (each on a /24 of
	// its own: secondaryNet).
	extra int
}

// secondaryNet is the pod's and the outside's address of the i-th
// secondary (Multus-style) network: 192.168.67+i.2 and .1, /24.
func secondaryNet(i int) (pod4, outside4 netip.Prefix) {
	return netip.MustParsePrefix(fmt.Sprintf("192.168.%d.2/24", 67+i)), netip.MustParsePrefix(fmt.Sprintf("192.168.%d.1/24", 67+i))
}

// setupNetwork runs the privileged phase (virt-handler's job in a cluster)
// when the VMI has masquerade or bridge interfaces.
func (r *runner) setupNetwork(ctx context.Context) error {
	ifaces, err := plan.PlanFor(r.vmi, plan.PlanOptions{})
	if err != nil {
		return err
	}
	if len(ifaces) == 0 {
		return nil
	}
	pod, err := podnet.New(podnet.Config{Dir: r.workDir, Name: r.netName})
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	n := &network{r: r, pod: pod, plan: ifaces}
	r.net = n
	for _, ifc := range ifaces {
		if ifc.PodIface == "eth0" { // podnet.New made it
			continue
		}
		// Secondary (Multus-style) networks appear as extra pod interfaces,
		// each on a /24 of its own towards the outside namespace.
		pod4, out4 := secondaryNet(n.extra)
		n.extra++
		if err := pod.AddInterface(ifc.PodIface, pod4, out4); err != nil {
			return fmt.Errorf("pod interface %s: %w", ifc.PodIface, err)
		}
	}
	// This runs before the hand-over: root alone can write the work dir.
	// The vif caches in private/ go to the launcher's user with the rest
	// of its directories (handOver).
	if err := netsetup.SetupPrivileged(ctx, pod.NS, r.vmi, n.privileged(), r.log); err != nil {
		return fmt.Errorf("network privileged phase: %w", err)
	}
	n.up = true
	return nil
}

// privileged configures the privileged phase: the vif caches go to the
// launcher's private dir, the restore state, which root acts on at the
// end, to the work dir that stays root's.
func (n *network) privileged() netsetup.PrivilegedConfig {
	return netsetup.PrivilegedConfig{QemuUID: n.r.owner.uid, QemuGID: n.r.owner.gid,
		CacheDir: n.r.layout.PrivateDir, StateDir: n.r.workDir}
}

// resolvConf is the pod's resolver configuration, for the DHCP server.
func (n *network) resolvConf() string { return n.pod.ResolvConf }

func (n *network) printForwards(w io.Writer) {
	for _, f := range n.pod.Forwards(n.plan) {
		if f.Port == 0 {
			fmt.Fprintf(w, "vlctl: interface %s: every port of the guest is reachable at %s (from namespace %s)\n", f.Iface, f.Address, n.pod.OutsideName)
			continue
		}
		fmt.Fprintf(w, "vlctl: interface %s: guest %s/%d is reachable at %s (from namespace %s)\n", f.Iface, f.Protocol, f.Port, f.Address, n.pod.OutsideName)
	}
}

// plug does for an interface plugged into the running VM (vlctl
// addinterface) what Multus and virt-handler do: a new secondary pod
// interface, then the privileged phase for next, the VMI with the
// interface, which wires only what is new. It returns the pod interface
// and its address; nothing is left when it fails.
func (n *network) plug(ctx context.Context, next *v1.VirtualMachineInstance, name string) (podIface string, pod4 netip.Prefix, err error) {
	ifaces, err := plan.PlanFor(next, plan.PlanOptions{})
	if err != nil {
		return "", netip.Prefix{}, err
	}
	for _, it := range ifaces {
		if it.Name == name {
			podIface = it.PodIface
		}
	}
	if podIface == "" {
		return "", netip.Prefix{}, fmt.Errorf("interface %s: not a bridge or masquerade interface of the VM", name)
	}
	pod4, out4 := secondaryNet(n.extra)
	if err := n.pod.AddInterface(podIface, pod4, out4); err != nil {
		return "", netip.Prefix{}, fmt.Errorf("pod interface %s: %w", podIface, err)
	}
	n.extra++
	if err := netsetup.SetupPrivileged(ctx, n.pod.NS, next, n.privileged(), n.r.log); err != nil {
		return "", netip.Prefix{}, errors.Join(fmt.Errorf("network privileged phase: %w", err), n.pod.RemoveInterface(podIface))
	}
	return podIface, pod4, nil
}

// unplug undoes plug for interface name of prev (the VMI before the
// unplug, where the interface is not absent yet).
func (n *network) unplug(ctx context.Context, prev *v1.VirtualMachineInstance, name, podIface string) error {
	return errors.Join(netsetup.TeardownInterface(ctx, n.pod.NS, prev, name, n.privileged()), n.pod.RemoveInterface(podIface))
}

func (n *network) teardown() error {
	var errs []error
	if n.up {
		if err := netsetup.TeardownPrivileged(context.Background(), n.pod.NS, n.r.vmi, n.privileged(), n.r.log); err != nil {
			errs = append(errs, fmt.Errorf("network teardown: %w", err))
		}
	}
	if err := n.pod.Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove pod network: %w", err))
	}
	return errors.Join(errs...)
}
