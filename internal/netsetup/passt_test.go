package netsetup_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// readSysctl reads a sysctl of the namespace the thread is in.
func readSysctl(t testing.TB, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// TestPrivilegedPasst: for a passt interface the privileged phase leaves
// the pod's links, addresses, routes and nftables as they are (no bridge,
// no tap: passt serves the guest from the pod's own sockets) and sets the
// pod namespace's ICMP echo group to the VM's group and its first
// unprivileged port to 0, as virt-handler does; the host's own sysctls do
// not change, and teardown finds nothing to remove.
func TestPrivilegedPasst(t *testing.T) {
	needRoot(t)
	pod := newPod(t, podnet.Config{})
	before := snapshot(t, pod.NS)
	hostPing, hostPort := readSysctl(t, "net/ipv4/ping_group_range"), readSysctl(t, "net/ipv4/ip_unprivileged_port_start")
	cfg := netsetup.PrivilegedConfig{QemuUID: 4242, QemuGID: 4343, CacheDir: t.TempDir()}
	vmi := passtVMI()
	ctx := context.Background()
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	if after := snapshot(t, pod.NS); after != before {
		t.Errorf("passt changed the pod's network:\nbefore %s\nafter  %s", before, after)
	}
	var ping, port string
	if err := plan.InNS(pod.NS, func() error {
		ping, port = readSysctl(t, "net/ipv4/ping_group_range"), readSysctl(t, "net/ipv4/ip_unprivileged_port_start")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ping != "4343 4343" || port != "0" {
		t.Errorf("pod sysctls: ping_group_range %q, ip_unprivileged_port_start %q; want \"4343 4343\" and \"0\"", ping, port)
	}
	if p, q := readSysctl(t, "net/ipv4/ping_group_range"), readSysctl(t, "net/ipv4/ip_unprivileged_port_start"); p != hostPing || q != hostPort {
		t.Errorf("host sysctls changed: %q %q, were %q %q", p, q, hostPing, hostPort)
	}
	if ents, _ := os.ReadDir(cfg.CacheDir); len(ents) > 0 {
		t.Errorf("passt wrote into the cache dir: %v", ents)
	}
	if err := netsetup.TeardownPrivileged(ctx, pod.NS, vmi, cfg, testLog(t)); err != nil {
		t.Errorf("teardown: %v", err)
	}
	if after := snapshot(t, pod.NS); after != before {
		t.Errorf("teardown changed the pod's network:\nbefore %s\nafter  %s", before, after)
	}
}
