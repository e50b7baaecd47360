package dhcp

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// pluginTap is the launcher's part for a binding plugin's interface with
// a tap domain attachment, as KubeVirt v1.9's: no DHCP (the plugin serves
// the guest, if anyone does), only the facts of the domain's interface
// from the pod: the spec's MAC, else the pod interface's; the pod
// interface's MTU; the tap KubeVirt names for the pod interface when one
// exists (the plugin's CNI made it, or virt-handler for managedTap), else
// the pod interface itself.
func (s *Servers) pluginTap(it plan.Iface) (served, error) {
	var f facts.Interface
	err := plan.InNS(s.cfg.NetNS, func() error {
		pod, err := netlink.LinkByName(it.PodIface)
		if err != nil {
			return fmt.Errorf("pod interface %s: %w", it.PodIface, err)
		}
		f.MAC, f.MTU, f.Tap = pod.Attrs().HardwareAddr.String(), uint(pod.Attrs().MTU), it.PodIface
		if it.MAC != nil {
			f.MAC = it.MAC.String()
		}
		if _, err := netlink.LinkByName(it.Tap); err == nil {
			f.Tap = it.Tap
		}
		return nil
	})
	if err != nil {
		return served{}, err
	}
	s.log.Info("binding plugin tap interface", "iface", it.Name, "tap", f.Tap, "mac", f.MAC, "mtu", f.MTU)
	return served{facts: f}, nil
}
