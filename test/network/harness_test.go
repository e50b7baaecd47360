// Package network proves the network bindings end to end through the real
// launcher path: standalone.Run (what `vlctl run` calls) builds the pod and
// outside namespaces, runs the privileged phase, starts
// virt-launcher-monitor and virt-launcher as the unprivileged user inside
// the pod namespace, and the launcher's DHCP server answers the test
// guest's udhcpc. The guest (internal/testguest) runs a user-data script
// that talks to an HTTP server in the outside namespace and listens on
// ports the test reaches from there: IPv4 and IPv6 through the masquerade
// NAT, the pod's own address with the bridge binding, and a secondary
// (Multus-style) bridge network. Everything is real: QEMU under TCG,
// libvirt, netlink, nftables.
package network

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/vishvananda/netns"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// binDir holds virt-launcher-monitor and virt-launcher built for this run
// (standalone.Config.BinDir); empty when the build was not possible.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(launchertest.MainBinaries(m, &binDir, "vlnetbin", "./cmd/virt-launcher", "./cmd/virt-launcher-monitor"))
}

func needRoot(t *testing.T) {
	t.Helper()
	// network namespaces, taps, nftables, the launcher as another user
	testenv.Programs(t, "qemu-system-x86_64", "nft")
	if binDir == "" {
		t.Fatal("binaries not built")
	}
}

// shortDir makes a directory with a short absolute name: the launcher's
// libvirt puts unix sockets several levels below the work dir, and their
// paths are limited to 107 bytes.
func shortDir(t *testing.T, prefix string) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		d := fmt.Sprintf("/run/%s%04x", prefix, time.Now().UnixNano()&0xffff)
		if err := os.Mkdir(d, 0o755); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	t.Fatal("no free short directory under /run")
	return ""
}

// consoleBuf collects the guest's serial console as standalone.Run writes it.
type consoleBuf struct{ testenv.SyncBuffer }

// waitFor waits until the console has a line containing s, or fails early
// when done (Run returned) closes.
func (c *consoleBuf) waitFor(s string, timeout time.Duration, done <-chan struct{}) error {
	deadline := time.After(timeout)
	// The line holding s must be complete: callers read the rest of it.
	has := func(out string) bool {
		i := strings.Index(out, s)
		return i >= 0 && strings.Contains(out[i:], "\n")
	}
	for {
		if has(c.String()) {
			return nil
		}
		select {
		case <-deadline:
			return fmt.Errorf("no %q on the console within %s", s, timeout)
		case <-done:
			if has(c.String()) {
				return nil
			}
			return fmt.Errorf("run ended before %q appeared on the console", s)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// inNamedNS runs fn with the calling thread in the network namespace
// /run/netns/<name>.
func inNamedNS(name string, fn func() error) error {
	h, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer h.Close()
	return plan.InNS(h, fn)
}

// serveHTTP serves body on addr inside the named namespace until the test ends.
func serveHTTP(t *testing.T, nsName, addr, body string) error {
	var ln net.Listener
	if err := inNamedNS(nsName, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return nil
}

// dialIn connects to addr with a socket made in the named namespace.
func dialIn(ctx context.Context, nsName, network, addr string) (net.Conn, error) {
	var conn net.Conn
	var derr error
	err := inNamedNS(nsName, func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, derr = d.DialContext(ctx, network, addr)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return conn, derr
}

// getIn fetches url from inside the named namespace.
func getIn(nsName, url string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialIn(ctx, nsName, network, addr)
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

// nsInode is the inode of a /run/netns pin: the namespace's identity.
func nsInode(name string) (uint64, error) {
	fi, err := os.Stat(filepath.Join("/run/netns", name))
	if err != nil {
		return 0, err
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

// userData is the guest's script. The init prints the script before it
// runs it, so no marker the test looks for appears literally in it: each
// is put together from $M at run time. In the background (user-data runs
// before the init's udhcpc) it waits for eth0's lease, fetches the outside
// page (busybox-static's wget crashes in the static glibc resolver, nc
// does not), starts httpd on a declared and an undeclared port and says so.
var userData = template.Must(template.New("ud").Parse(`#!/bin/sh
M=VL-T
(
  i=0
  until ip -4 addr show dev eth0 | grep -q 'inet '; do
    i=$((i + 1)); [ $i -gt 300 ] && { echo "$M-NO-ADDRESS"; exit 1; }
    sleep 1
  done
{{- if .Secondary}}
  # The secondary (Multus-style) interface: its lease printed by a small
  # event script of ours, then the outside's page on that network.
  cat >/tmp/lease1 <<'EOS'
#!/bin/sh
[ "$1" = bound ] || exit 0
ip addr add "$ip/$mask" dev "$interface"
M=VL-T
echo "$M-ETH1-LEASE $ip/$mask router ${router:-none} mtu ${mtu:-none}" >/dev/console
EOS
  chmod +x /tmp/lease1
  ip link set eth1 up
  udhcpc -i eth1 -s /tmp/lease1 -q -n -t 10 -T 2 -O mtu >/dev/null 2>&1 || echo "$M-ETH1-FAILED"
  i=0
  until printf 'GET / HTTP/1.0\r\nHost: outside\r\n\r\n' | nc -w 5 {{.Secondary}} {{.OutsidePort}} >/tmp/page1 && grep -q 'HTTP/1' /tmp/page1; do
    i=$((i + 1)); [ $i -gt 30 ] && break
    sleep 1
  done
  echo "$M-PAGE1-BEGIN"
  cat /tmp/page1
  echo
  echo "$M-PAGE1-END"
{{- end}}
  i=0
  # Behind Debian 12's passt the far end's close now and then never
  # reaches the guest (the whole answer does): nc gets a deadline there.
  until printf 'GET / HTTP/1.0\r\nHost: outside\r\n\r\n' | {{if .Passt}}timeout 10 {{end}}nc -w 5 {{.Outside}} {{.OutsidePort}} >/tmp/page; grep -q 'HTTP/1' /tmp/page; do
    i=$((i + 1)); [ $i -gt 30 ] && break
    sleep 1
  done
  echo "$M-PAGE-BEGIN"
  cat /tmp/page
  echo
  echo "$M-PAGE-END"
{{- if .Resolver}}
  # A name through the resolver DHCP gave (the test checks the lease).
  nslookup vl-dns.test {{.Resolver}} >/tmp/ns 2>&1
  echo "$M-NS-BEGIN"
  cat /tmp/ns
  echo "$M-NS-END"
{{- end}}
  mkdir -p /www/a /www/b
  echo "guest-{{.Port}}-{{.Token}}" >/www/a/index.html
  echo "guest-{{.Undeclared}}-{{.Token}}" >/www/b/index.html
  httpd -p {{.Port}} -h /www/a && httpd -p {{.Undeclared}} -h /www/b && echo "$M-LISTENING"
{{- if .Guest6}}
  # busybox-static has no DHCPv6 client: the address the launcher's DHCPv6
  # server hands out, set by hand, to cross the IPv6 NAT both ways.
  ip -6 addr add {{.Guest6}} dev eth0 && ip -6 route add default via {{.Gateway6}} dev eth0
  i=0
  until printf 'GET / HTTP/1.0\r\nHost: outside\r\n\r\n' | nc -w 5 {{.Outside6}} {{.OutsidePort}} >/tmp/page6 && grep -q 'HTTP/1' /tmp/page6; do
    i=$((i + 1)); [ $i -gt 30 ] && break
    sleep 1
  done
  echo "$M-PAGE6-BEGIN"
  cat /tmp/page6
  echo
  echo "$M-PAGE6-END"
{{- end}}
  echo "$M-DONE"
) &
`))
