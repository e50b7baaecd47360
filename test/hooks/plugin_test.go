package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestBindingPluginTap: an interface bound to a network binding plugin
// whose domainAttachmentType is tap (virt-handler's
// InterfaceDomainAttachment says "tap") becomes the launcher's own
// <interface type="ethernet"> on the tap the plugin's CNI made in the pod,
// as KubeVirt v1.9's launcher makes it: the spec's MAC, the pod
// interface's MTU, the tap with KubeVirt's name (tap0 on the pod network),
// managed="no", and no DHCP from the launcher (KubeVirt serves none to a
// plugin's interface). The test plays the CNI: it makes tap0 for QEMU's
// user with an address of its own in the pod namespace; the guest, with a
// static address, pings it.
func TestBindingPluginTap(t *testing.T) {
	t.Parallel()
	const (
		mac       = "02:00:00:5a:7e:01"
		mtu       = 1400
		tapAddr   = "10.201.0.1/24"
		guestCIDR = "10.201.0.2/24"
	)
	p := env.NewDeferred(t, "pltap", launchertest.Options{Network: true, NetworkPlugin: "tapplug"})
	p.ExtraUserData = []string{
		`echo "PLUG""-NIC $(cat /sys/class/net/eth0/address) $(cat /sys/class/net/eth0/mtu)"`,
		`ip link set eth0 up; echo "PLUG""-DHCP $(udhcpc -i eth0 -n -q -t 3 -T 1 -s /bin/true >/dev/null 2>&1 && echo lease || echo none)"`,
		`ip addr add ` + guestCIDR + ` dev eth0; echo "PLUG""-PING $(ping -c 3 -W 2 10.201.0.1 >/dev/null 2>&1; echo $?)"`,
	}
	playTapCNI(t, p, "eth0", "tap0", mtu, tapAddr)
	p.Start()
	p.WaitReady(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("pltap-3c9d")
	v.Spec.Domain.Devices.Interfaces[0].MacAddress = mac
	if err := c.Sync(ctx, v, &cmdv1.VirtualMachineOptions{InterfaceDomainAttachment: p.DomainAttachments()}); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain: exists=%v err=%v", exists, err)
	}
	ifs := d.Spec.Devices.Interfaces
	if len(ifs) != 1 {
		t.Fatalf("domain interfaces %+v, want one", ifs)
	}
	i := ifs[0]
	if i.Type != "ethernet" || i.Target == nil || i.Target.Device != "tap0" || i.Target.Managed != "no" ||
		i.MAC == nil || i.MAC.MAC != mac || i.MTU == nil || i.MTU.Size != fmt.Sprint(mtu) ||
		i.Alias == nil || i.Alias.Name != "default" || !i.Alias.UserDefined {
		t.Errorf("domain interface %+v (target %+v, MAC %+v, MTU %+v), want ethernet on tap0 managed=no, MAC %s, MTU %d, user alias default",
			i, i.Target, i.MAC, i.MTU, mac, mtu)
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	p.WaitConsole("PLUG-PING", 90*time.Second)
	out := p.Console()
	if got, _ := testguest.FindMarker(out, "PLUG-NIC"); got != fmt.Sprintf("%s %d", mac, mtu) {
		t.Errorf("guest's eth0 (MAC MTU) %q, want %s %d; console:\n%s", got, mac, mtu, out)
	}
	if got, _ := testguest.FindMarker(out, "PLUG-DHCP"); got != "none" {
		t.Errorf("guest's DHCP on the plugin's interface: %q, want none (the launcher serves no DHCP to a plugin); console:\n%s", got, out)
	}
	if got, _ := testguest.FindMarker(out, "PLUG-PING"); got != "0" {
		t.Errorf("guest's ping of the CNI's end of the tap: exit %q, want 0; console:\n%s", got, out)
	}
	stopGracefully(t, p)
	if !strings.Contains(p.Stderr.String(), "binding plugin tap interface") {
		t.Errorf("the launcher did not log the plugin's interface:\n%s", p.Stderr.String())
	}
	p.AssertNothingLeft()
}

// playTapCNI does in the pod what a tap binding plugin's CNI does: the tap
// KubeVirt names for the pod interface (tap0 on the pod network), QEMU's
// user's, on the pod interface's MTU, here with an address of its own
// (addr) for the guest to reach. The pod interface's MTU is set to mtu
// first, so that the domain's can be told from a default.
func playTapCNI(t *testing.T, p *launchertest.Pod, podIface, tapName string, mtu int, addr string) {
	t.Helper()
	launchertest.Must(t, p.InPodNetwork(func() error {
		pl, err := netlink.LinkByName(podIface)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(pl, mtu); err != nil {
			return fmt.Errorf("%s MTU: %w", podIface, err)
		}
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tapName, MTU: mtu}, Mode: netlink.TUNTAP_MODE_TAP,
			Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE,
			Owner: env.Cred.Uid, Group: env.Cred.Gid}
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Errorf("%s: %w", tapName, err)
		}
		l, err := netlink.LinkByName(tapName)
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			return err
		}
		return errors.Join(netlink.LinkSetMTU(l, mtu), netlink.AddrAdd(l, a), netlink.LinkSetUp(l))
	}))
}

// TestBindingPluginLinkRefresh: a binding plugin whose migration method
// is linkRefresh (virt-handler sends InterfaceMigration {Method:
// "link-refresh"} in FinalizeVirtualMachineMigration) has its interface's
// link set down and up again when the migration is finalized, as KubeVirt
// v1.9's launcher does, so that the guest renews its lease in the new pod.
// The guest counts its NIC's carrier changes: none after a Finalize
// without the method, two (down, up) after one with it; the link ends up.
func TestBindingPluginLinkRefresh(t *testing.T) {
	t.Parallel()
	p := env.NewDeferred(t, "plref", launchertest.Options{Network: true, NetworkPlugin: "tapplug"})
	p.ExtraUserData = []string{
		`ip link set eth0 up; sleep 2; c0=$(cat /sys/class/net/eth0/carrier_changes); echo "LINK""-WATCH $c0"`,
		`(while [ "$(cat /sys/class/net/eth0/carrier_changes)" -lt $((c0+2)) ]; do sleep 1; done; echo "LINK""-REFRESHED $c0 $(cat /sys/class/net/eth0/carrier_changes) $(cat /sys/class/net/eth0/carrier)") &`,
	}
	playTapCNI(t, p, "eth0", "tap0", 1500, "10.202.0.1/24")
	p.Start()
	p.WaitReady(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("plref-51e0")
	if err := c.Sync(ctx, v, &cmdv1.VirtualMachineOptions{InterfaceDomainAttachment: p.DomainAttachments()}); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	p.WaitConsole("LINK-WATCH", 30*time.Second)

	if err := c.FinalizeMigration(ctx, v, nil); err != nil {
		t.Fatalf("Finalize without a link refresh: %v", err)
	}
	time.Sleep(3 * time.Second) // the guest looks every second
	if _, seen := testguest.FindMarker(p.Console(), "LINK-REFRESHED"); seen {
		t.Fatalf("the guest's link changed after a Finalize that asked no refresh:\n%s", p.Console())
	}
	refresh := &cmdv1.VirtualMachineOptions{InterfaceMigration: map[string]*cmdv1.InterfaceBindingMigration{"default": {Method: "link-refresh"}}}
	if err := c.FinalizeMigration(ctx, v, refresh); err != nil {
		t.Fatalf("Finalize with a link refresh: %v", err)
	}
	p.WaitConsole("LINK-REFRESHED", 30*time.Second)
	got, _ := testguest.FindMarker(p.Console(), "LINK-REFRESHED")
	var c0, c1, carrier int
	if _, err := fmt.Sscan(got, &c0, &c1, &carrier); err != nil || c1 != c0+2 || carrier != 1 {
		t.Errorf("guest's carrier changes before, after, and carrier: %q, want two changes and the carrier up", got)
	}
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists || len(d.Spec.Devices.Interfaces) != 1 {
		t.Fatalf("GetDomain: exists=%v err=%v", exists, err)
	}
	if ls := d.Spec.Devices.Interfaces[0].LinkState; ls != nil && ls.State != "up" {
		t.Errorf("link state after the refresh %+v, want up", ls)
	}
	stopGracefully(t, p)
	p.AssertNothingLeft()
}

// TestBindingPluginHotplug: a NIC bound to a tap-attached binding plugin on
// a Multus network is plugged into the running VM and unplugged again, as
// KubeVirt v1.9's launcher plugs a bridge one: once Multus reports the
// pod interface (the test adds it, and plays the plugin's CNI with its
// tap<hash>), the Sync with the interface and its "tap" attachment
// attaches <interface type="ethernet"> on that tap with the spec's MAC;
// the guest finds the NIC and pings the tap's pod end. With the interface
// absent the Sync detaches it and the guest loses it. The VM's own NIC is
// masquerade, which virt-handler also reports as "tap".
func TestBindingPluginHotplug(t *testing.T) {
	t.Parallel()
	const name, mac = "blue", "02:00:00:b1:0e:77"
	p := env.NewDeferred(t, "plhot", launchertest.Options{Network: true})
	findNIC := fmt.Sprintf(`n=; for i in /sys/class/net/*; do [ "$(cat $i/address)" = %s ] && n=${i##*/}; done`, mac)
	p.ExtraUserData = []string{
		`(while :; do ` + findNIC + `; [ -n "$n" ] && break; sleep 1; done; ip link set $n up; ip addr add 10.203.0.2/24 dev $n; ` +
			`echo "HOT""-PING $n $(ping -c 3 -W 2 10.203.0.1 >/dev/null 2>&1; echo $?)"; ` +
			`while [ -e /sys/class/net/$n ]; do sleep 1; done; echo "HOT""-GONE $n") &`,
	}
	p.Start()
	p.WaitReady(30 * time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	v := p.VMI("plhot-9a20")
	if err := c.Sync(ctx, v, &cmdv1.VirtualMachineOptions{InterfaceDomainAttachment: map[string]string{"default": "tap"}}); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)

	podIface := p.PlugPodInterface(name)
	tap := plan.TapName(podIface)
	playTapCNI(t, p, podIface, tap, 1500, "10.203.0.1/24")
	v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: name, MacAddress: mac,
		Binding: &v1.PluginBinding{Name: "tapplug"}})
	v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: name,
		NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "blue-net"}}})
	v.Status.Interfaces = append(v.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: name, InfoSource: "multus-status", InterfaceName: podIface})
	both := &cmdv1.VirtualMachineOptions{InterfaceDomainAttachment: map[string]string{"default": "tap", name: "tap"}}
	if err := c.Sync(ctx, v, both); err != nil {
		t.Fatalf("Sync with the plugged interface: %v", err)
	}
	if got := pluginIface(t, ctx, c, name); got != tap+" "+mac {
		t.Errorf("domain interface %s after the plug: %q, want %s %s", name, got, tap, mac)
	}
	p.WaitConsole("HOT-PING", 90*time.Second)
	got, _ := testguest.FindMarker(p.Console(), "HOT-PING")
	if f := strings.Fields(got); len(f) != 2 || f[1] != "0" {
		t.Fatalf("guest's ping over the plugged NIC: %q, want the NIC and exit 0; console:\n%s", got, p.Console())
	}

	v.Spec.Domain.Devices.Interfaces[len(v.Spec.Domain.Devices.Interfaces)-1].State = v1.InterfaceStateAbsent
	if err := c.Sync(ctx, v, both); err != nil {
		t.Fatalf("Sync with the interface absent: %v", err)
	}
	if got := pluginIface(t, ctx, c, name); got != "" {
		t.Errorf("domain interface %s after the unplug: %q, want none", name, got)
	}
	p.WaitConsole("HOT-GONE", 60*time.Second)

	stopGracefully(t, p)
	p.AssertNothingLeft()
}

// pluginIface is the tap and MAC of the domain's interface with user
// alias name, "" when it has none.
func pluginIface(t *testing.T, ctx context.Context, c *cmdclient.Client, name string) string {
	t.Helper()
	d, exists, err := c.GetDomain(ctx)
	if err != nil || !exists {
		t.Fatalf("GetDomain: exists=%v err=%v", exists, err)
	}
	for _, i := range d.Spec.Devices.Interfaces {
		if i.Alias == nil || i.Alias.Name != name || !i.Alias.UserDefined {
			continue
		}
		var tap, mac string
		if i.Target != nil {
			tap = i.Target.Device
		}
		if i.MAC != nil {
			mac = i.MAC.MAC
		}
		return tap + " " + mac
	}
	return ""
}
