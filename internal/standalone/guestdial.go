package standalone

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/runrecord"
)

// DialGuest connects to the guest's TCP port of a running VM as a
// published port reaches it (guestnet.Services): the pod's address, from the
// run's outside network namespace, so the pod interface's masquerade
// binding forwards it as it forwards any connection from the pod network
// (KubeVirt's port-forward dials the VMI's address too). vlctl ssh goes
// this way, so the guest's SSH port need not be published on the host.
func DialGuest(e *runrecord.Entry, port uint16) (net.Conn, error) {
	if err := guestPortForwarded(e.VMI, port); err != nil {
		return nil, fmt.Errorf("%s: %w", e.FullName(), err)
	}
	var addr runrecord.Address
	for _, a := range e.Addresses {
		if a.NetNS != "" {
			addr = a
			break
		}
	}
	if addr.NetNS == "" {
		return nil, fmt.Errorf("%s: its record has no pod network address (a VM without a pod network, or a run recorded before its guest started)", e.FullName())
	}
	if !podnet.IsNamespaceName(addr.NetNS) {
		return nil, fmt.Errorf("%s: its record names the network namespace %q, not one of vlctl's", e.FullName(), addr.NetNS)
	}
	ip, err := netip.ParseAddr(addr.IP)
	if err != nil {
		return nil, fmt.Errorf("%s: its record's address %q: %w", e.FullName(), addr.IP, err)
	}
	ns, err := netns.GetFromName(addr.NetNS)
	if err != nil {
		return nil, fmt.Errorf("%s: network namespace %s: %w", e.FullName(), addr.NetNS, err)
	}
	defer ns.Close()
	to := netip.AddrPortFrom(ip, port)
	c, err := guestnet.DialIn(ns, to)
	if err != nil {
		return nil, fmt.Errorf("%s: connect to the guest at %s (from namespace %s): %w", e.FullName(), to, addr.NetNS, err)
	}
	return c, nil
}

// guestPortForwarded refuses a port the pod interface's masquerade
// binding does not forward: with ports declared, only those reach the
// guest (guestnet.CheckPublished says the same of --publish).
func guestPortForwarded(vmi *v1.VirtualMachineInstance, port uint16) error {
	if vmi == nil {
		return nil
	}
	pod := map[string]bool{}
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil {
			pod[n.Name] = true
		}
	}
	for i, it := range vmi.Spec.Domain.Devices.Interfaces {
		if !pod[it.Name] || it.Masquerade == nil || len(it.Ports) == 0 {
			continue
		}
		var declared []string
		for _, p := range it.Ports {
			if p.Protocol == "" || strings.EqualFold(p.Protocol, "TCP") {
				if uint16(p.Port) == port {
					return nil
				}
				declared = append(declared, strconv.Itoa(int(p.Port)))
			}
		}
		return fmt.Errorf("interface %s declares the ports its masquerade binding forwards (TCP %s), and %d is not one of them: add it to spec.domain.devices.interfaces[%d].ports",
			it.Name, strings.Join(declared, ", "), port, i)
	}
	return nil
}
