package conformance

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// domainInterfaces lists the Domain's interfaces as virt-handler reads
// them: alias, tap and MAC of each, sorted.
func domainInterfaces(t *testing.T, h *handler) string {
	t.Helper()
	data, err := h.getDomain(t)
	launchertest.Must(t, err)
	d, err := kvshape.Decode([]byte(data))
	launchertest.Must(t, err)
	var out []string
	for _, i := range d.Spec.Devices.Interfaces {
		var alias, tap, mac string
		if i.Alias != nil {
			alias = i.Alias.Name
		}
		if i.Target != nil {
			tap = i.Target.Device
		}
		if i.MAC != nil {
			mac = i.MAC.MAC
		}
		out = append(out, alias+"/"+tap+"/"+mac)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// checkNICHotplug plays a NIC hotplug and unplug as KubeVirt drives them
// on a guest with the pod network: Multus adds a secondary pod
// interface and virt-handler's privileged phase wires a bridge and tap for
// it (launchertest.PlugNetwork); the Sync with the interface in the spec
// and its pod interface in the status plugs it. The guest sees a new NIC
// with the spec's MAC, leases the pod interface's address from the
// launcher's DHCP server and reaches the other end of the network. With
// its state absent the Sync unplugs it, and the guest loses the NIC.
func checkNICHotplug(t *testing.T, h *handler, p *pod, vmiJSON []byte) {
	t.Helper()
	t0 := time.Now()
	const name, mac = "blue", "02:00:00:b1:0e:01"
	podIface := plan.HashedPodIfaceName(name)
	tap := plan.TapName(podIface)

	var v v1.VirtualMachineInstance
	launchertest.Must(t, json.Unmarshal(vmiJSON, &v))
	v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces, v1.Interface{Name: name, MacAddress: mac,
		InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
	v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: name,
		NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "blue-net"}}})
	// Before Multus reports the pod interface: nothing to do yet.
	waiting, err := json.Marshal(&v)
	launchertest.Must(t, err)
	before := domainInterfaces(t, h)
	if err := h.vmiCall(t, "SyncVirtualMachine (interface, no pod interface yet)", h.cmd.SyncVirtualMachine, waiting); err != nil {
		t.Errorf("%v", err)
	}
	if got := domainInterfaces(t, h); got != before {
		t.Errorf("interfaces %s before the pod interface exists, want them as they were: %s", got, before)
	}

	madeIface, pod4, outside4 := p.PlugNetwork(&v, name)
	if madeIface != podIface {
		t.Fatalf("the pod interface made for %s is %s, want KubeVirt's hashed name %s", name, madeIface, podIface)
	}
	v.Status.Interfaces = append(v.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: name, InfoSource: "multus-status", InterfaceName: podIface})
	plugged, err := json.Marshal(&v)
	launchertest.Must(t, err)
	if err := h.vmiCall(t, "SyncVirtualMachine (NIC hotplug)", h.cmd.SyncVirtualMachine, plugged); err != nil {
		t.Fatalf("%v", err)
	}
	if got, want := domainInterfaces(t, h), name+"/"+tap+"/"+mac; !strings.Contains(got, want) {
		t.Errorf("the Domain's interfaces after the hotplug: %s, want one %s", got, want)
	}
	// virt-handler's next reconcile changes nothing.
	if err := h.vmiCall(t, "SyncVirtualMachine (NIC plugged, again)", h.cmd.SyncVirtualMachine, plugged); err != nil {
		t.Errorf("%v", err)
	}

	// The guest: a NIC with the MAC, a lease from the launcher's DHCP
	// server on it, and the other end of the network answering.
	findNIC := fmt.Sprintf(`n=; for i in /sys/class/net/*; do [ "$(cat $i/address)" = %s ] && n=${i##*/}; done`, mac)
	m := guestAnswer(t, p, "hotplugged NIC", findNIC+`; echo VL-T-NIC-$n-X`, regexp.MustCompile(`VL-T-NIC-(eth\d+)-X`), 60*time.Second)
	nic := m[1]
	t.Logf("guest sees the hotplugged NIC as %s after %v", nic, time.Since(t0))
	m = guestAnswer(t, p, "lease on the hotplugged NIC",
		fmt.Sprintf(`ip link set %s up; udhcpc -i %s -s /etc/udhcpc.script -q -n -t 5 -T 2 -O mtu >/dev/null 2>&1; echo VL-T-LEASE-$(ip -4 -o addr show dev %s | grep -o 'inet [0-9./]*' | cut -d' ' -f2)-X`, nic, nic, nic),
		regexp.MustCompile(`VL-T-LEASE-([0-9./]+)-X`), 60*time.Second)
	if m[1] != pod4.String() {
		t.Errorf("the guest's %s leased %s, want the pod interface's %s", nic, m[1], pod4)
	}
	guestAnswer(t, p, "the network behind the hotplugged NIC",
		fmt.Sprintf(`ping -c 1 -W 2 -I %s %s >/dev/null 2>&1; echo VL-T-PING-$?-X`, nic, outside4.Addr()),
		regexp.MustCompile(`VL-T-PING-0-X`), 30*time.Second)

	// Unplug: state absent; the Sync answers once QEMU has let go.
	v.Spec.Domain.Devices.Interfaces[len(v.Spec.Domain.Devices.Interfaces)-1].State = v1.InterfaceStateAbsent
	absent, err := json.Marshal(&v)
	launchertest.Must(t, err)
	if err := h.vmiCall(t, "SyncVirtualMachine (NIC unplug)", h.cmd.SyncVirtualMachine, absent); err != nil {
		t.Fatalf("%v", err)
	}
	if got := domainInterfaces(t, h); got != before {
		t.Errorf("the Domain's interfaces after the unplug: %s, want %s", got, before)
	}
	// Its DHCP server went with it (the log says so; no socket is left
	// on the bridge virt-handler removes next).
	if !regexp.MustCompile(`"iface":"blue"[^\n]*"msg":"DHCP stopped"`).MatchString(p.Stderr.String()) {
		t.Errorf("no log line says blue's DHCP server stopped after the unplug")
	}
	guestAnswer(t, p, "NIC gone from the guest", fmt.Sprintf(`echo VL-T-NICGONE-$(ls /sys/class/net | grep -c '^%s$')-X`, nic),
		regexp.MustCompile(`VL-T-NICGONE-0-X`), 30*time.Second)
	// virt-controller then drops the interface from the spec.
	if err := h.vmiCall(t, "SyncVirtualMachine (interface removed from the spec)", h.cmd.SyncVirtualMachine, vmiJSON); err != nil {
		t.Errorf("%v", err)
	}
	t.Logf("NIC hotplug and unplug done in %v", time.Since(t0))
}
