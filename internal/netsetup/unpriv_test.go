package netsetup_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
)

// publicDir is a directory an unprivileged child can enter.
func publicDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vlnet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnprivilegedDHCP runs the unprivileged phase as it runs in a pod: a
// non-root process inside the pod namespace holding only
// CAP_NET_BIND_SERVICE. It serves a lease; without the capability it fails
// clearly.
func TestUnprivilegedDHCP(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pub := publicDir(t)
	pod := newPod(t, podnet.Config{NoIPv6: true})
	priv := netsetup.PrivilegedConfig{QemuUID: 4242, QemuGID: 4242, CacheDir: filepath.Join(pub, "private")}
	vmi := masqVMI("vm1")
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(pub, "resolv.conf")
	if b, err := os.ReadFile(pod.ResolvConf); err != nil || os.WriteFile(rc, b, 0o644) != nil {
		t.Fatal("copy resolv.conf")
	}
	bin := filepath.Join(pub, "t")
	b, err := os.ReadFile(os.Args[0])
	if err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatal("copy test binary")
	}

	start := func(caps []uintptr) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
		var cmd *exec.Cmd
		var stdin io.WriteCloser
		var stdout io.Reader
		err := plan.InNS(pod.NS, func() error {
			cmd = exec.Command(bin, "-test.run=^TestHelperServeDHCP$", "-test.v")
			cmd.Env = []string{"VL_DHCP_CACHE=" + priv.CacheDir, "VL_DHCP_RESOLV=" + rc}
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Credential:  &syscall.Credential{Uid: 4242, Gid: 4242},
				AmbientCaps: caps,
				Pdeathsig:   syscall.SIGKILL,
			}
			cmd.Stderr = cmd.Stdout
			var err error
			if stdin, err = cmd.StdinPipe(); err != nil {
				return err
			}
			if stdout, err = cmd.StdoutPipe(); err != nil {
				return err
			}
			return cmd.Start()
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, stdin, bufio.NewReader(stdout)
	}
	waitLine := func(r *bufio.Reader, want ...string) (string, error) {
		lines := make(chan string)
		go func() {
			defer close(lines)
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				lines <- l
			}
		}()
		var seen strings.Builder
		timeout := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return seen.String(), fmt.Errorf("child ended:\n%s", seen.String())
				}
				seen.WriteString(l)
				for _, w := range want {
					if strings.Contains(l, w) {
						return l, nil
					}
				}
			case <-timeout:
				return seen.String(), fmt.Errorf("timeout:\n%s", seen.String())
			}
		}
	}

	// Without the capability: a clear failure binding port 67.
	_, _, out := start(nil)
	if l, err := waitLine(out, "VL-HELPER-SERVING", "VL-HELPER-FAILED"); err != nil || !strings.Contains(l, "VL-HELPER-FAILED") || !strings.Contains(l, "permission denied") {
		t.Errorf("without CAP_NET_BIND_SERVICE: %q %v", l, err)
	}

	// With it: serves a lease.
	_, stdin, out := start([]uintptr{monitor.CapNetBindService})
	if l, err := waitLine(out, "VL-HELPER-SERVING", "VL-HELPER-FAILED"); err != nil || !strings.Contains(l, "VL-HELPER-SERVING") {
		t.Fatalf("with CAP_NET_BIND_SERVICE: %q %v", l, err)
	}
	c, err := plan.ReadVifCache(priv.CacheDir, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	g, err := pod.AttachFakeGuest("k6t-eth0", net.HardwareAddr(c.MAC))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if ack := dhcpLease(t, g).ACK; ack.YourIPAddr.String() != "10.0.2.2" {
		t.Errorf("lease from the unprivileged server: %s", ack.Summary())
	}
	stdin.Close()
}

// TestHelperServeDHCP is the child of TestUnprivilegedDHCP: it serves until
// its stdin closes.
func TestHelperServeDHCP(t *testing.T) {
	cache := os.Getenv("VL_DHCP_CACHE")
	if cache == "" {
		t.Skip("helper process only")
	}
	_, stop, err := dhcp.Start(context.Background(), masqVMI("vm1"),
		dhcp.Config{CacheDir: cache, ResolvConf: os.Getenv("VL_DHCP_RESOLV")}, nil)
	if err != nil {
		fmt.Printf("VL-HELPER-FAILED uid=%d %v\n", os.Getuid(), err)
		return
	}
	defer stop()
	fmt.Printf("VL-HELPER-SERVING uid=%d\n", os.Getuid())
	io.Copy(io.Discard, os.Stdin)
}

// TestDHCPWithoutCache is the cluster case: KubeVirt's virt-handler writes
// no cache for masquerade and a bridge cache without MAC or MTU; the
// launcher takes them from the links in the pod.
func TestDHCPWithoutCache(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	pod := newPod(t, podnet.Config{MTU: 1420})
	priv := netsetup.PrivilegedConfig{QemuUID: 107, QemuGID: 107, CacheDir: t.TempDir()}
	vmi := masqVMI("vm1")
	if err := netsetup.SetupPrivileged(ctx, pod.NS, vmi, priv, testLog(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netsetup.TeardownPrivileged(ctx, pod.NS, vmi, priv, testLog(t)) })
	cached, err := plan.ReadVifCache(priv.CacheDir, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(priv.CacheDir, "vif-cache-eth0.json")); err != nil {
		t.Fatal(err)
	}
	ifs, stop, err := dhcp.Start(ctx, vmi, dhcp.Config{CacheDir: priv.CacheDir, ResolvConf: pod.ResolvConf, NetNS: pod.NS}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if f := ifs["default"]; f.MAC != cached.MAC.String() || f.MTU != 1420 {
		t.Errorf("facts without cache %+v, with cache MAC %s", f, cached.MAC)
	}
	g, err := pod.AttachFakeGuest("k6t-eth0", cached.MAC)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if ack := dhcpLease(t, g).ACK; ack.YourIPAddr.String() != "10.0.2.2" {
		t.Errorf("lease %s", ack.Summary())
	}

	// Bridge binding has no such fallback: its cache is the only record of
	// the pod's address.
	if _, _, err := dhcp.Start(ctx, bridgeVMI("vm2"), dhcp.Config{CacheDir: t.TempDir(), NetNS: pod.NS}, nil); err == nil ||
		!strings.Contains(err.Error(), "privileged phase not run") {
		t.Errorf("bridge without cache: %v", err)
	}
}
