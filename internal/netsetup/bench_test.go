package netsetup_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// BenchmarkPrivilegedSetup times the privileged phase of a masquerade
// interface with a declared port (bridge, tap, addresses, sysctls, both
// nftables families, cache) in a fresh pod namespace each round.
func BenchmarkPrivilegedSetup(b *testing.B) {
	needRoot(b)
	ctx := context.Background()
	vmi := masqVMI("vm")
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pod, err := podnet.New(podnet.Config{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: b.TempDir()}
		b.StartTimer()
		start := time.Now()
		if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, nil); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		pod.Remove()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/setup")
}

// BenchmarkFirstLease times StartDHCP plus a full DISCOVER/OFFER/
// REQUEST/ACK exchange from a fake guest already plugged into the bridge.
func BenchmarkFirstLease(b *testing.B) {
	needRoot(b)
	ctx := context.Background()
	vmi := masqVMI("vm")
	pod, err := podnet.New(podnet.Config{Dir: b.TempDir(), NoIPv6: true})
	if err != nil {
		b.Fatal(err)
	}
	defer pod.Remove()
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: b.TempDir()}
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, nil); err != nil {
		b.Fatal(err)
	}
	c, err := plan.ReadVifCache(priv.CacheDir, "eth0")
	if err != nil {
		b.Fatal(err)
	}
	g, err := pod.AttachFakeGuest("k6t-eth0", net.HardwareAddr(c.MAC))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Remove()
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		_, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir,
			ResolvConf: pod.ResolvConf, NetNS: pod.NS}, nil)
		if err != nil {
			b.Fatal(err)
		}
		lease := dhcpLease(b, g)
		total += time.Since(start)
		stop()
		if lease.ACK.YourIPAddr.String() != "10.0.2.2" {
			b.Fatalf("lease %s", lease.ACK.YourIPAddr)
		}
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/lease")
}
