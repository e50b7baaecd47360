package netsetup_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// A masquerade pod interface plus a Multus-style secondary bridged one:
// one bridge and tap each, named as KubeVirt names them, both served by
// DHCP, and all of it gone after teardown.
func TestTwoInterfaces(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{NoIPv6: true})
	blue := plan.HashedPodIfaceName("blue")
	if err := pod.AddInterface(blue, netip.MustParsePrefix("192.168.77.2/24"), netip.MustParsePrefix("192.168.77.1/24")); err != nil {
		t.Fatal(err)
	}
	vmi := withMultus(masqVMI("vm"), "blue")
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	before := snapshot(t, pod.NS)
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	snap := snapshot(t, pod.NS)
	hash := strings.TrimPrefix(blue, "pod")
	for _, want := range []string{
		"link k6t-eth0 type=bridge", "link tap0 type=tuntap master=k6t-eth0",
		"link k6t-" + hash + " type=bridge", "link tap" + hash + " type=tuntap master=k6t-" + hash,
		"link " + hash + "-nic type=veth master=k6t-" + hash,
		"addr k6t-" + hash + " 169.254.75.11/32", // interface index 1
		"addr " + blue + " 192.168.77.2/24",      // kept by the placeholder
	} {
		if !strings.Contains(snap, want) {
			t.Errorf("missing %q in:\n%s", want, snap)
		}
	}
	ifs, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir,
		ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	if err != nil {
		t.Fatalf("dhcp: %v", err)
	}
	if ifs["default"].Tap != "tap0" || ifs["blue"].Tap != "tap"+hash || len(ifs) != 2 {
		t.Errorf("facts: %+v", ifs)
	}
	for name, want := range map[string]string{"default": "10.0.2.2", "blue": "192.168.77.2"} {
		mac, _ := net.ParseMAC(ifs[name].MAC)
		bridge := "k6t-eth0"
		if name == "blue" {
			bridge = "k6t-" + hash
		}
		g, err := pod.AttachFakeGuest(bridge, mac)
		if err != nil {
			t.Fatal(err)
		}
		ack := dhcpLease(t, g).ACK
		if ack.YourIPAddr.String() != want {
			t.Errorf("%s: lease %s, want %s", name, ack.YourIPAddr, want)
		}
		if name == "blue" && len(ack.Router()) != 0 {
			t.Errorf("blue has no default route in the pod, yet the lease names router %v", ack.Router())
		}
		g.Remove()
	}
	stop()
	if err := netsetup.TeardownPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatalf("teardown: %v", err)
	}
	if after := snapshot(t, pod.NS); after != before {
		t.Errorf("teardown left changes:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// Interfaces served one at a time, as a NIC hotplug and unplug need them:
// the masquerade interface from the start, a Multus-style bridged one
// after the privileged phase wired it later; each leases its address,
// and once the second is stopped it answers no more while the first still
// does.
func TestServersPerInterface(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{NoIPv6: true})
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	first := masqVMI("vm")
	if err := netsetup.SetupPrivileged(ctx, pod.NS, first, priv, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	s := dhcp.New(dhcp.Config{CacheDir: priv.CacheDir, ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	t.Cleanup(func() { s.Close() })
	ifs, err := s.Serve(ctx, first, nil)
	if err != nil || len(ifs) != 1 {
		t.Fatalf("serve the first interface: %v, %+v", err, ifs)
	}

	// The hotplug: the VMI gains "blue", Multus adds its pod interface,
	// the privileged phase wires it (a second run changes only that).
	blue := plan.HashedPodIfaceName("blue")
	hash := strings.TrimPrefix(blue, "pod")
	if err := pod.AddInterface(blue, netip.MustParsePrefix("192.168.78.2/24"), netip.MustParsePrefix("192.168.78.1/24")); err != nil {
		t.Fatal(err)
	}
	both := withMultus(masqVMI("vm"), "blue")
	t.Cleanup(func() { netsetup.TeardownPrivileged(ctx, pod.NS, both, priv, testLog(t)) })
	if _, err := s.Serve(ctx, both, nil, "blue"); err == nil {
		t.Errorf("Serve of blue before the privileged phase wired it succeeded")
	}
	if err := netsetup.SetupPrivileged(ctx, pod.NS, both, priv, testLog(t)); err != nil {
		t.Fatalf("setup of the hotplugged interface: %v", err)
	}
	if _, err := s.Serve(ctx, both, nil, "nosuch"); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("Serve of an interface the VMI lacks: %v, want an error naming it", err)
	}
	ifs, err = s.Serve(ctx, both, nil, "blue")
	if err != nil {
		t.Fatalf("serve blue: %v", err)
	}
	if len(ifs) != 2 || ifs["blue"].Tap != "tap"+hash || ifs["default"].Tap != "tap0" {
		t.Errorf("facts after the hotplug: %+v", ifs)
	}
	lease := func(name, bridge string) (string, error) {
		mac, _ := net.ParseMAC(ifs[name].MAC)
		g, err := pod.AttachFakeGuest(bridge, mac)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Remove()
		l, err := tryDHCPLease(g, 1)
		if err != nil {
			return "", err
		}
		return l.ACK.YourIPAddr.String(), nil
	}
	if got, err := lease("blue", "k6t-"+hash); err != nil || got != "192.168.78.2" {
		t.Errorf("blue's lease: %s, %v; want 192.168.78.2", got, err)
	}

	// The unplug: blue is no longer served, default still is.
	if err := s.Stop("blue"); err != nil {
		t.Fatalf("stop blue: %v", err)
	}
	if got, err := lease("blue", "k6t-"+hash); err == nil {
		t.Errorf("blue leased %s after its servers stopped", got)
	}
	if got, err := lease("default", "k6t-eth0"); err != nil || got != "10.0.2.2" {
		t.Errorf("default's lease after blue stopped: %s, %v; want 10.0.2.2", got, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := s.Serve(ctx, both, nil); err == nil {
		t.Errorf("Serve after Close succeeded")
	}
}

func TestDHCPv6Masquerade(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{DNS: []string{"192.168.66.1", "fd00:66::1"}})
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := masqVMI("vm")
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	t.Cleanup(func() { netsetup.TeardownPrivileged(ctx, pod.NS, vmi, priv, testLog(t)) })
	ifs, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir,
		ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	if err != nil {
		t.Fatalf("dhcp: %v", err)
	}
	defer stop()
	mac, _ := net.ParseMAC(ifs["default"].MAC)
	g, err := pod.AttachFakeGuest("k6t-eth0", mac)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	var reply *dhcpv6.Message
	err = plan.InNS(g.NS, func() error {
		// Numeric zones: Go's zone-name cache is process-wide and does not
		// know which namespace an "eth0" is in.
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		zone := strconv.Itoa(l.Attrs().Index)
		ll, err := dhcpv6.GetLinkLocalAddr("eth0")
		if err != nil {
			return err
		}
		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: ll, Port: dhcpv6.DefaultClientPort, Zone: zone})
		if err != nil {
			return err
		}
		c, err := nclient6.NewWithConn(conn, l.Attrs().HardwareAddr, nclient6.WithTimeout(2*time.Second), nclient6.WithRetry(3),
			nclient6.WithBroadcastAddr(&net.UDPAddr{IP: dhcpv6.AllDHCPRelayAgentsAndServers, Port: dhcpv6.DefaultServerPort, Zone: zone}))
		if err != nil {
			conn.Close()
			return err
		}
		defer c.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		adv, err := c.Solicit(cctx)
		if err != nil {
			return fmt.Errorf("solicit: %w", err)
		}
		reply, err = c.Request(cctx, adv)
		return err
	})
	if err != nil {
		t.Fatalf("DHCPv6 exchange: %v", err)
	}
	addr := reply.Options.OneIANA().Options.OneAddress()
	if addr == nil || addr.IPv6Addr.String() != "fd10:0:2::2" {
		t.Errorf("DHCPv6 reply: %s", reply.Summary())
	}
	if fmt.Sprint(reply.Options.DNS()) != "[fd00:66::1]" {
		t.Errorf("DHCPv6 DNS = %v", reply.Options.DNS())
	}
}

func TestMultiQueueTap(t *testing.T) {
	needRoot(t)
	pod := newPod(t, podnet.Config{NoIPv6: true})
	vmi := masqVMI("vm")
	yes := true
	vmi.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
	vmi.Spec.Domain.CPU = &v1.CPU{Cores: 2}
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 108, CacheDir: t.TempDir()}
	if err := netsetup.SetupPrivileged(context.Background(), pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatal(err)
	}
	err := plan.InNS(pod.NS, func() error {
		l, err := netlink.LinkByName("tap0")
		if err != nil {
			return err
		}
		tp := l.(*netlink.Tuntap)
		if tp.Flags&netlink.TUNTAP_MULTI_QUEUE == 0 || tp.Owner != 107 || tp.Group != 108 {
			return fmt.Errorf("tap0 flags %#x owner %d group %d", tp.Flags, tp.Owner, tp.Group)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestTapOpenableByQemuUser opens the persistent tap the way QEMU does,
// from a child process running as the QEMU uid in the pod namespace: the
// owner may attach, another unprivileged uid may not.
func TestTapOpenableByQemuUser(t *testing.T) {
	needRoot(t)
	pod := newPod(t, podnet.Config{NoIPv6: true})
	vmi := masqVMI("vm")
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	if err := netsetup.SetupPrivileged(context.Background(), pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatal(err)
	}
	// The test binary must be executable by the unprivileged uid.
	dir, err := os.MkdirTemp("", "vltap")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "t")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(uid uint32) error {
		var out []byte
		var runErr error
		err := plan.InNS(pod.NS, func() error {
			cmd := exec.Command(bin, "-test.run=^TestHelperOpenTap$")
			cmd.Env = []string{"VL_OPEN_TAP=tap0"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			out, runErr = cmd.CombinedOutput()
			return nil
		})
		if err != nil {
			return err
		}
		if runErr != nil {
			return fmt.Errorf("%v: %s", runErr, out)
		}
		return nil
	}
	if err := run(107); err != nil {
		t.Errorf("QEMU uid cannot open tap0: %v", err)
	}
	if err := run(4321); err == nil {
		t.Errorf("a foreign uid opened tap0")
	}
}

// TestHelperOpenTap is the child of TestTapOpenableByQemuUser.
func TestHelperOpenTap(t *testing.T) {
	name := os.Getenv("VL_OPEN_TAP")
	if name == "" {
		t.Skip("helper process only")
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		t.Fatalf("TUNSETIFF %s as uid %d: %v", name, os.Getuid(), errno)
	}
}
