// Package network proves the network bindings end to end with a real
// guest: the test guest (internal/testguest) boots under QEMU attached to
// the tap the privileged phase made, its udhcpc talks to our DHCP server,
// and traffic crosses the NAT in both directions.
//
// QEMU is started directly here, as the unprivileged virtlauncher user in
// the pod namespace, the way libvirt starts it for the launcher (tap
// opened by name, managed='no'). The launcher path (vlctl run) reuses the
// same pieces: podnet, SetupPrivileged, StartDHCP.
package network

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/podnet"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

func qemuUser(t *testing.T) (uint32, uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, taps, nftables")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed")
	}
	u, err := user.Lookup("virtlauncher")
	if err != nil {
		t.Fatalf("user virtlauncher missing (scripts/install-deps): %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid)
}

// console is the guest's serial console on QEMU's stdio.
type console struct {
	mu  sync.Mutex
	out strings.Builder
	in  io.Writer
	t   *testing.T
}

func (c *console) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// wait returns the console text once it contains s after offset from.
func (c *console) wait(s string, from int, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if txt := c.text(); len(txt) > from && strings.Contains(txt[from:], s) {
			return txt[from:], nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("no %q on the console within %s; console:\n%s", s, timeout, c.text())
}

// run types a shell command and waits for its exit status, printed after
// a marker; the typed line's echo shows "$?" where the result has digits.
func (c *console) run(cmd string, timeout time.Duration) (string, error) {
	from := len(c.text())
	if _, err := fmt.Fprintf(c.in, "%s; echo VL-CMD-DONE-$?\n", cmd); err != nil {
		return "", err
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out := c.text()[from:]
		if m := doneRE.FindStringSubmatch(out); m != nil {
			if m[1] != "0" {
				return out, fmt.Errorf("%s: exit status %s:\n%s", cmd, m[1], out)
			}
			return out, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c.text()[from:], fmt.Errorf("%s: no exit status within %s:\n%s", cmd, timeout, c.text()[from:])
}

var doneRE = regexp.MustCompile(`VL-CMD-DONE-([0-9]+)`)

// bootGuest starts QEMU as the QEMU user inside the pod namespace with
// its NIC on tap0 and returns the console once the guest is ready.
func bootGuest(t *testing.T, pod *podnet.Pod, mac string, uid, gid uint32) *console {
	t.Helper()
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	// A root disk spares the init its 10 s wait for one. QEMU runs as the
	// QEMU user, so the copy lives in a directory that user can enter.
	diskDir, err := os.MkdirTemp("", "vlnet-disk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(diskDir) })
	disk := filepath.Join(diskDir, "root.img")
	if err := g.CopyRootDisk(disk); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(diskDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(disk, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	c := &console{t: t}
	var cmd *exec.Cmd
	err = netsetup.InNS(pod.NS, func() error {
		// The child inherits this thread's network namespace.
		cmd = exec.Command("qemu-system-x86_64",
			"-machine", "q35,accel=tcg", "-m", "256", "-nodefaults", "-display", "none", "-no-reboot",
			"-kernel", g.Kernel, "-initrd", g.Initrd,
			"-drive", "file="+disk+",if=virtio,format=raw",
			"-append", testguest.DefaultCmdline,
			"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,mac="+mac+",romfile=",
			"-serial", "stdio", "-monitor", "none")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}, Pdeathsig: syscall.SIGKILL}
		cmd.Dir = "/"
		in, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = cmd.Stdout
		c.in = in
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() {
			r := bufio.NewReader(out)
			buf := make([]byte, 4096)
			for {
				n, err := r.Read(buf)
				c.mu.Lock()
				c.out.Write(buf[:n])
				c.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatalf("start QEMU: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("guest console:\n%s", c.text())
		}
	})
	start := time.Now()
	if _, err := c.wait(testguest.MarkerReady, 0, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	up, _ := testguest.FindMarker(c.text(), testguest.MarkerReady)
	t.Logf("guest ready after %s (%s)", time.Since(start).Round(time.Millisecond), up)
	if _, err := c.wait("vl# ", 0, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

func serveHTTP(t *testing.T, pod *podnet.Pod, addr, body string) {
	t.Helper()
	var ln net.Listener
	if err := netsetup.InNS(pod.Outside, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// getFromOutside fetches url with a socket in the outside namespace.
func getFromOutside(pod *podnet.Pod, url string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			var derr error
			err := netsetup.InNS(pod.Outside, func() error {
				d := net.Dialer{Timeout: 5 * time.Second}
				conn, derr = d.DialContext(ctx, network, addr)
				return nil
			})
			if err != nil {
				return nil, err
			}
			return conn, derr
		},
	}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func vmiWith(binding v1.InterfaceBindingMethod, ports ...v1.Port) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace = "testvm", "default"
	vmi.Spec.Networks = []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", InterfaceBindingMethod: binding, Ports: ports}}
	return vmi
}

func TestGuestNetwork(t *testing.T) {
	uid, gid := qemuUser(t)
	for _, tc := range []struct {
		name     string
		vmi      *v1.VirtualMachineInstance
		addr     string // guest's leased address
		router   string
		hostPort string // where the outside reaches the guest's 8080
	}{
		{"masquerade", vmiWith(v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}, v1.Port{Port: 8080}),
			"10.0.2.2/24", "10.0.2.1", "192.168.66.2:8080"},
		{"bridge", vmiWith(v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}),
			"192.168.66.2/24", "192.168.66.1", "192.168.66.2:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			dir := t.TempDir()
			pod, err := podnet.New(podnet.Config{Dir: dir, MTU: 1400, NoIPv6: true,
				DNS: []string{"192.168.66.1"}, Search: []string{"default.svc.cluster.local", "cluster.local"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pod.Remove() })
			priv := netsetup.PrivilegedConfig{QemuUID: int(uid), QemuGID: int(gid), CacheDir: filepath.Join(dir, "private")}
			if err := netsetup.SetupPrivileged(ctx, pod.NS, tc.vmi, priv, log); err != nil {
				t.Fatal(err)
			}
			ifs, stop, err := netsetup.StartDHCP(ctx, tc.vmi, netsetup.DHCPConfig{CacheDir: priv.CacheDir,
				ResolvConf: pod.ResolvConf, NetNS: pod.NS}, log)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stop() })
			c := bootGuest(t, pod, ifs["default"].MAC, uid, gid)

			args, ok := testguest.FindMarker(c.text(), testguest.MarkerDHCP)
			if !ok {
				t.Fatalf("guest got no lease")
			}
			l, err := testguest.ParseDHCP(args)
			if err != nil {
				t.Fatal(err)
			}
			if l.Address != tc.addr || strings.Join(l.Routers, ",") != tc.router ||
				strings.Join(l.DNS, ",") != "192.168.66.1" || l.MTU != 1400 || l.Hostname != "testvm" ||
				!strings.Contains(strings.Join(l.Search, " "), "default.svc.cluster.local") {
				t.Errorf("guest lease %+v", l)
			}

			serveHTTP(t, pod, "192.168.66.1:8000", "hello from outside")
			// busybox-static's wget crashes in glibc's static resolver; nc does not.
			out, err := c.run(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 192.168.66.1 8000`, 30*time.Second)
			if err != nil || !strings.Contains(out, "hello from outside") {
				t.Errorf("guest -> outside: %v\n%s", err, out)
			}
			if _, err := c.run("mkdir -p /www && echo guest-page > /www/index.html && httpd -p 8080 -h /www && httpd -p 8081 -h /www", 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if body, err := getFromOutside(pod, "http://"+tc.hostPort+"/"); err != nil || strings.TrimSpace(body) != "guest-page" {
				t.Errorf("outside -> %s: %q, %v", tc.hostPort, body, err)
			}
			if tc.name == "masquerade" {
				if body, err := getFromOutside(pod, "http://192.168.66.2:8081/"); err == nil {
					t.Errorf("undeclared port 8081 forwarded: %q", body)
				}
			}
		})
	}
}
