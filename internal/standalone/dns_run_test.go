package standalone_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/testnet"
)

// TestVlctlRunDNS: the guest resolves a name through the resolver DHCP
// gave it (the pod's, in the outside namespace), which vlctl relays to the
// resolver --dns names: one the test runs on loopback. It also reaches a
// web server of a host of the internet (egress), but not a service of the
// host itself, a link-local address or a cloud metadata service.
func TestVlctlRunDNS(t *testing.T) {
	needRoot(t)
	t.Parallel()
	dns := testnet.ServeDNS(t)
	web := testnet.FarHost(t, "VL-EGRESS-PAGE")
	hostSvc := testnet.HostService(t, "VL-HOST-PAGE")

	file := testGuestManifest(t, "dns")
	root, records := workRoot(t), workRoot(t)
	cmd, stdout, errOut, exited := startVlctl(t, "run", "--emulation", "--workdir", root, "--record-dir", records, "--dns", dns, file)
	waitFor(t, "the guest", 4*time.Minute, exited, func() bool {
		return strings.Contains(stdout.String(), testguest.MarkerReady)
	})
	if !strings.Contains(errOut.String(), "vlctl: guest DNS relayed to "+dns) {
		t.Errorf("vlctl run did not say where DNS goes:\n%s", errOut.String())
	}
	// The guest's resolver is what DHCP gave it: VL-DHCP ... dns ADDR.
	var server string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(l); len(f) > 6 && f[0] == testguest.MarkerDHCP && f[4] == "dns" {
			server = f[5]
		}
	}
	if server == "" {
		t.Fatalf("no DHCP line with a DNS server on the console")
	}
	c := openConsole(t, "console", records, "default/dns")
	t.Cleanup(c.close)
	out := &c.out
	answered := func() bool { return strings.Contains(out.String(), "VL-RESOLVED-42") }
	if !c.typeUntil("nslookup vl-dns.test "+server+" && echo VL-RESOLVED-$((6*7))", 5*time.Second, answered) {
		t.Fatalf("the guest did not resolve vl-dns.test through %s:\n%s", server, out.String())
	}
	if !strings.Contains(out.String(), "192.0.2.42") {
		t.Errorf("nslookup in the guest did not show 192.0.2.42:\n%s", out.String())
	}
	// Egress: the test host's page; a link-local address (where cloud
	// metadata services are) is refused.
	fetched := func() bool { return strings.Contains(out.String(), "VL-EGRESS-PAGE") }
	if !c.typeUntil(fmt.Sprintf("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 %s %d", web.Addr(), web.Port()), 5*time.Second, fetched) {
		t.Errorf("the guest did not fetch the test host's page at %s:\n%s", web, out.String())
	}
	if !strings.Contains(errOut.String(), "vlctl: guest egress: TCP to the addresses this host reaches") {
		t.Errorf("vlctl run did not say the guest has a way out:\n%s", errOut.String())
	}
	// Refused: a service of the host (on an address of the host's
	// namespace), link-local and cloud metadata addresses.
	fmt.Fprintf(c.in, "\nprintf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 %s %d; printf 'x' | nc -w 5 169.254.169.254 80; printf 'x' | nc -w 5 168.63.129.16 80; echo VL-METADATA-TRIED-$((6*7))\n",
		hostSvc.Addr(), hostSvc.Port())
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "VL-METADATA-TRIED-42") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{
		fmt.Sprintf("guest egress: to %s: the host's own addresses are not reachable", hostSvc),
		"guest egress: to 169.254.169.254:80: link-local addresses",
		"guest egress: to 168.63.129.16:80: a cloud metadata service",
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("the relay did not refuse (%s), or said nothing:\n%s", want, errOut.String())
		}
	}
	if strings.Contains(out.String(), "VL-HOST-PAGE") {
		t.Errorf("the guest reached a service of the host:\n%s", out.String())
	}
	c.in.Close()
	interruptEnds(t, cmd, exited, root)
}
