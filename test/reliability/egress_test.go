package reliability

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testnet"
)

// egressMonitor plays a hostile guest: started by vlctl run as
// virt-launcher-monitor, it runs as the VM's id in the pod's network
// namespace, where a guest's connections come from. It holds @N@
// connections through egress to the far host until the test says go,
// then asks for a service of the host, Azure's wireserver and the far
// host, and ends as a failed launcher would.
const egressMonitor = `#!/bin/bash
# A refused connection is closed under the request.
trap '' PIPE
out='@OUT@'
note() { echo "$*" >>"$out/notes"; }
fds=()
for i in $(seq 1 @N@); do
	if exec {fd}<>/dev/tcp/@FARIP@/@FARPORT@; then fds+=($fd); else note "connect $i failed"; fi
done
note "held ${#fds[@]}"
for i in $(seq 1 600); do [ -e "$out/go" ] && break; sleep 0.1; done
for fd in "${fds[@]}"; do exec {fd}>&-; done
fetch() {
	exec 9<>/dev/tcp/$1/$2 || { note "fetch $1 failed"; return; }
	printf 'GET / HTTP/1.0\r\n\r\n' >&9
	timeout 5 cat <&9 >"$out/$3"
	exec 9>&-
}
sleep 1
fetch @HOSTIP@ @HOSTPORT@ host-answer
fetch 168.63.129.16 80 metadata-answer
fetch @FARIP@ @FARPORT@ far-answer
echo "egress monitor done"
exit 3
`

// TestEgressFromThePod: vlctl run's egress under a guest that holds more
// connections than a VM may and asks for the host. The connections the
// far host sees are the limit's number, owned by the VM's id (not root),
// the rest closed at once with a few lines (not one each); a service on an
// address of the host and a cloud metadata endpoint are refused, named;
// once the held connections end, the far host answers again. Afterwards
// nothing is left: no process, work dir, namespace or connection.
func TestEgressFromThePod(t *testing.T) {
	u := needLinkUser(t)
	far := testnet.FarHost(t, "VL-FAR-PAGE")
	host := testnet.HostService(t, "VL-HOST-PAGE")
	const limit, over = 256, 20
	out := userDir(t, u)
	script := strings.NewReplacer("@OUT@", out, "@N@", fmt.Sprint(limit+over),
		"@FARIP@", far.Addr().String(), "@FARPORT@", fmt.Sprint(far.Port()),
		"@HOSTIP@", host.Addr().String(), "@HOSTPORT@", fmt.Sprint(host.Port())).Replace(egressMonitor)
	l := newLinkRun(t, u, script)
	var status testenv.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- standalone.Run(ctx, standalone.Config{
			ManifestOptions: standalone.ManifestOptions{File: l.manifest},
			HostOptions: standalone.HostOptions{WorkRoot: l.workRoot, UIDs: l.uids, BinDir: l.binDir,
				CapsCache: "none", RecordDir: testenv.OpenDir(t)},
			HardwareOptions: standalone.HardwareOptions{Emulation: true},
			TerminalOptions: standalone.TerminalOptions{Console: io.Discard},
			ReportOptions:   standalone.ReportOptions{Status: &status},
		})
	}()
	notes := func() string { b, _ := os.ReadFile(filepath.Join(out, "notes")); return string(b) }
	for deadline := time.Now().Add(time.Minute); !strings.Contains(notes(), "held "); {
		select {
		case err := <-done:
			t.Fatalf("vlctl run ended before the monitor held its connections: %v\n%s", err, status.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the monitor held no connections in a minute:\n%s\n%s", notes(), status.String())
		}
	}
	// The relay may still be dialling the last ones.
	var owners []int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var err error
		if owners, err = testnet.TCPOwners(far); err != nil {
			t.Fatal(err)
		}
		if len(owners) >= limit {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // none beyond the limit comes late
	if owners, _ = testnet.TCPOwners(far); len(owners) != limit {
		t.Errorf("the far host has %d connections from the relay, want %d (the limit)", len(owners), limit)
	}
	for _, o := range owners {
		if o != u.uid {
			t.Errorf("a relayed connection is owned by uid %d, want %d (the VM's)", o, u.uid)
			break
		}
	}
	if n := strings.Count(status.String(), "the most allowed"); n == 0 || n > 10 {
		t.Errorf("%d connections over the limit made %d lines, want 1 to 10:\n%s", over, n, status.String())
	}
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("vlctl run did not end after the monitor did")
	}
	if err == nil || !strings.Contains(err.Error(), "egress monitor done") {
		t.Errorf("vlctl run: %v, want the fake launcher's failure\n%s", err, status.String())
	}
	answer := func(name string) string { b, _ := os.ReadFile(filepath.Join(out, name)); return string(b) }
	if a := answer("host-answer"); strings.Contains(a, "VL-HOST-PAGE") {
		t.Errorf("the pod reached a service of the host: %q", a)
	}
	if a := answer("metadata-answer"); a != "" {
		t.Errorf("the pod got an answer from 168.63.129.16: %q", a)
	}
	if a := answer("far-answer"); !strings.Contains(a, "VL-FAR-PAGE") {
		t.Errorf("after its connections ended, the pod did not reach the far host: %q\nnotes: %s\n%s", a, notes(), status.String())
	}
	for _, want := range []string{
		fmt.Sprintf("vlctl: guest egress: to %s: the host's own addresses are not reachable", host),
		"vlctl: guest egress: to 168.63.129.16:80: a cloud metadata service is not reachable",
	} {
		if !strings.Contains(status.String(), want) {
			t.Errorf("vlctl run did not say %q:\n%s", want, status.String())
		}
	}
	l.nothingLeft(t)
	if owners, _ := testnet.TCPOwners(far); len(owners) > 0 {
		t.Errorf("%d connections to the far host left", len(owners))
	}
	m := regexp.MustCompile(`pod network up \(namespaces (\S+) and (\S+)\)`).FindStringSubmatch(status.String())
	if m == nil {
		t.Fatalf("vlctl run did not name its namespaces:\n%s", status.String())
	}
	for _, ns := range m[1:] {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			t.Errorf("namespace %s left", ns)
		}
	}
}
