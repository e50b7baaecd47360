package netsetup_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// udhcpcEnv runs busybox's udhcpc in the fake guest's namespace, asking
// for the given extra options, and returns the variables its script saw
// on the lease ("bound"), one NAME=value a line.
func udhcpcEnv(t *testing.T, g *podnet.FakeGuest, opts ...string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && env >"+out+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"netns", "exec", g.NSName, "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "busybox", "udhcpc", "-i", "eth0", "-f", "-q", "-n", "-t", "5", "-T", "2", "-s", script}
	for _, o := range opts {
		args = append(args, "-O", o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if b, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("udhcpc: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("udhcpc's script saw no lease: %v", err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

// TestDHCPOptionsReachClient: an interface's dhcpOptions reach a real
// DHCP client (busybox udhcpc) as KubeVirt's server sends them: the TFTP
// server name in option 66 and the boot file name in option 67 as text,
// the NTP servers in option 42, each private option with its value's
// bytes under its own code.
func TestDHCPOptionsReachClient(t *testing.T) {
	needRoot(t)
	testenv.Programs(t, "busybox", "ip")
	ctx := context.Background()
	pod := newPod(t, podnet.Config{NoIPv6: true})
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := masqVMI("vm1")
	vmi.Spec.Domain.Devices.Interfaces[0].DHCPOptions = &v1.DHCPOptions{
		BootFileName:   "pxelinux.0",
		TFTPServerName: "tftp.example.org",
		NTPServers:     []string{"192.0.2.123", "198.51.100.7"},
		PrivateOptions: []v1.DHCPPrivateOptions{{Option: 224, Value: "hello"}, {Option: 254, Value: "a b"}},
	}
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	t.Cleanup(func() { netsetup.TeardownPrivileged(ctx, pod.NS, vmi, priv, testLog(t)) })
	ifs, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir, ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	if err != nil {
		t.Fatalf("dhcp: %v", err)
	}
	defer stop()
	mac, _ := net.ParseMAC(ifs["default"].MAC)
	g, err := pod.AttachFakeGuest("k6t-eth0", mac)
	if err != nil {
		t.Fatalf("fake guest: %v", err)
	}
	defer g.Remove()

	env := udhcpcEnv(t, g, "tftp", "bootfile", "ntpsrv", "224", "254")
	for k, want := range map[string]string{
		"ip":       "10.0.2.2",
		"tftp":     "tftp.example.org",
		"bootfile": "pxelinux.0",
		"ntpsrv":   "192.0.2.123 198.51.100.7",
		"opt224":   "68656c6c6f", // "hello"
		"opt254":   "612062",     // "a b"
	} {
		if got := env[k]; got != want {
			t.Errorf("udhcpc %s = %q, want %q", k, got, want)
		}
	}
	if t.Failed() {
		t.Logf("udhcpc's environment: %v", env)
	}
}
