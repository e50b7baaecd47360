package network

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
	"github.com/virtlauncher/virtlauncher/internal/testnet"
)

// Where the test's HTTP server listens in the outside namespace: podnet's
// default outside address (standalone.Run takes podnet's defaults).
const (
	outsideAddr  = "192.168.66.1"
	outsideAddr6 = "fd00:66::1" // podnet's default outside IPv6 address
	podAddr6     = "fd00:66::2"
	// The first secondary pod interface standalone.Run adds.
	secondaryOutside = "192.168.67.1"
	secondaryPod     = "192.168.67.2"
	outsidePort      = 8000
	declared         = 80   // the VMI's only declared port
	undeclared       = 8081 // the guest listens here too; masquerade must not forward it
)

type netCase struct {
	name string
	// binding is standalone.Config.Binding. With explicit the manifest
	// declares the interface itself (and ports); without, the pod
	// interface is auto-attached with that binding (vlctl run --binding).
	binding  string
	explicit bool
	ports    []int
	// The lease the guest must get and where the outside reaches it.
	wantAddr, wantRouter string
	// checkUndeclared: ports are declared, so the undeclared one must not
	// be forwarded.
	checkUndeclared bool
	// secondary (with explicit) adds a Multus-style network with the
	// bridge binding: the run gives the pod a second interface
	// (192.168.67.2/24, whose outside end is secondaryOutside); the guest
	// leases that address on eth1 and both ends reach each other there.
	secondary bool
	// ipv6: the guest also takes the IPv6 VM address (fd10:0:2::2/120) and
	// crosses the IPv6 NAT both ways with the pod's fd00:66::2.
	ipv6 bool
	// passt: passt serves the guest (its DHCP gives the pod's own address,
	// no hostname, and passt's MTU). passt takes the gateway's address to
	// the pod's loopback, so the guest's outside page is a far host
	// (testnet.FarHost) reached through the run's egress, and it resolves
	// a name through the pod's resolver (pod.PasstResolver), which the
	// run relays to a resolver of the test.
	passt bool
}

// passtMTU is the MTU passt's DHCP gives the guest (passt's default).
const passtMTU = 65520

// TestLauncherNetwork boots one guest per binding through standalone.Run,
// checks its lease, NAT/DNAT both ways and the undeclared port, then
// cancels the run as Ctrl-C does and checks the graceful end and that
// nothing is left.
func TestLauncherNetwork(t *testing.T) {
	needRoot(t)
	if binDir == "" {
		t.Fatal("launcher binaries not built")
	}
	g, err := testguest.Build(context.Background(), testguest.DefaultCacheDir())
	if err != nil {
		t.Fatalf("test guest: %v", err)
	}
	for _, tc := range []netCase{
		{name: "masquerade", binding: "masquerade", explicit: true, ports: []int{declared},
			wantAddr: "10.0.2.2/24", wantRouter: "10.0.2.1", checkUndeclared: true, ipv6: true, secondary: true},
		// The auto-attached pod interface with vlctl run --binding bridge.
		{name: "bridge", binding: "bridge",
			wantAddr: "192.168.66.2/24", wantRouter: outsideAddr},
		// KubeVirt's core passt binding: passt, which libvirt starts as
		// the VM's user in the pod, leases the pod's address to the guest
		// and forwards the declared port only.
		{name: "passt", binding: "passtBinding", explicit: true, ports: []int{declared},
			wantAddr: "192.168.66.2/24", wantRouter: outsideAddr, checkUndeclared: true, passt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runNetCase(t, g, tc)
		})
	}
}

func runNetCase(t *testing.T, g *testguest.Guest, tc netCase) {
	root := shortDir(t, "vn")
	token := randomToken(t)
	var ud strings.Builder
	params := map[string]any{
		"Outside": outsideAddr, "OutsidePort": outsidePort, "Port": declared, "Undeclared": undeclared, "Token": token,
	}
	if tc.secondary {
		params["Secondary"] = secondaryOutside
	}
	if tc.ipv6 {
		params["Guest6"], params["Gateway6"], params["Outside6"] = "fd10:0:2::2/120", "fd10:0:2::1", outsideAddr6
	}
	var resolver string
	if tc.passt {
		far := testnet.FarHost(t, "outside-"+token)
		params["Outside"], params["OutsidePort"] = far.Addr().String(), far.Port()
		params["Resolver"], params["Passt"] = pod.PasstResolver.String(), true
		resolver = testnet.ServeDNS(t)
	}
	if err := userData.Execute(&ud, params); err != nil {
		t.Fatal(err)
	}
	binding := ""
	if tc.explicit {
		binding = tc.binding
	}
	// Names stay short: libvirt's socket paths below the work dir carry it.
	name := tc.name[:2]
	// The test guest with a root disk (so the init does not wait for one)
	// and the user-data script; without a binding, the interface KubeVirt
	// attaches by default.
	m := testguest.Manifest{
		Meta:    testguest.Meta{Name: name, Namespace: "default"},
		Boot:    testguest.Boot{Kernel: g.KernelDir, Cmdline: testguest.DefaultCmdline},
		Disks:   testguest.Disks{Root: g.RootDisk, UserData: ud.String()},
		Network: testguest.Network{AutoattachPod: true},
		Grace:   30,
	}
	if binding != "" {
		m.Pod = &testguest.Interface{Binding: binding, Ports: tc.ports}
		if tc.secondary {
			m.Multus = "net2"
		}
	}
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(m.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	tablesBefore := nftTables(t)

	console, status, logs := &consoleBuf{}, &consoleBuf{}, &consoleBuf{}
	startedc := make(chan standalone.Started, 1)
	autoBinding := tc.binding
	if tc.passt {
		autoBinding = "" // declared in the manifest; vlctl run --binding has no passt
	}
	cfg := standalone.Config{
		ManifestOptions: standalone.ManifestOptions{File: file, Binding: autoBinding},
		HostOptions:     standalone.HostOptions{WorkRoot: root, BinDir: binDir, QemuTimeout: 3 * time.Minute},
		HardwareOptions: standalone.HardwareOptions{Emulation: true},
		TerminalOptions: standalone.TerminalOptions{Console: console},
		ReportOptions: standalone.ReportOptions{Status: status,
			Log:     slog.New(slog.NewTextHandler(logs, nil)),
			Started: func(s standalone.Started) { startedc <- s }},
	}
	if resolver != "" {
		cfg.DNS = []string{resolver}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	begin := time.Now()
	go func() {
		defer close(done)
		runErr = standalone.Run(ctx, cfg)
	}()
	// Whatever happens below, the run ends before the test does.
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			t.Errorf("standalone.Run did not return within 3 min of its cancellation")
		}
		if t.Failed() {
			t.Logf("run error: %v\nstatus:\n%s\nconsole:\n%s\nlog:\n%s", runErr, status, console, logs)
		}
	})

	var st standalone.Started
	select {
	case st = <-startedc:
	case <-done:
		t.Fatalf("run ended before the guest ran: %v", runErr)
	case <-time.After(3 * time.Minute):
		t.Fatal("guest not running after 3 min")
	}
	t.Logf("domain running after %s (work dir %s)", time.Since(begin).Round(time.Millisecond), st.WorkDir)
	if st.OutsideNS == "" || st.PodAddress != "192.168.66.2" {
		t.Fatalf("started %+v: want an outside namespace and pod address 192.168.66.2", st)
	}
	podNS := "vlpod-" + strings.TrimPrefix(st.OutsideNS, "vlout-")
	inodes := map[string]uint64{}
	for _, ns := range []string{podNS, st.OutsideNS} {
		ino, err := nsInode(ns)
		if err != nil {
			t.Fatalf("namespace of the run: %v", err)
		}
		inodes[ns] = ino
	}
	if err := serveHTTP(t, st.OutsideNS, fmt.Sprintf("%s:%d", outsideAddr, outsidePort), "outside-"+token); err != nil {
		t.Fatalf("HTTP server in the outside namespace: %v", err)
	}
	if tc.secondary {
		if err := serveHTTP(t, st.OutsideNS, fmt.Sprintf("%s:%d", secondaryOutside, outsidePort), "outside1-"+token); err != nil {
			t.Fatalf("HTTP server on the secondary network: %v", err)
		}
	}
	if tc.ipv6 {
		if err := serveHTTP(t, st.OutsideNS, fmt.Sprintf("[%s]:%d", outsideAddr6, outsidePort), "outside6-"+token); err != nil {
			t.Fatalf("IPv6 HTTP server in the outside namespace: %v", err)
		}
	}
	dns, search := podResolvConf(t, st.WorkDir)
	mtu := podMTU(t, podNS)
	if want := fmt.Sprintf("TCP/%d is reachable at %s:%d", declared, st.PodAddress, declared); tc.checkUndeclared && !strings.Contains(status.String(), want) {
		t.Errorf("vlctl does not say where the declared port is: want %q in\n%s", want, status)
	}

	// The guest: lease, then the user-data's traffic.
	if err := console.waitFor(testguest.MarkerDHCP+" ", 4*time.Minute, done); err != nil {
		t.Fatal(err)
	}
	t.Logf("lease after %s", time.Since(begin).Round(time.Millisecond))
	args, _ := testguest.FindMarker(console.String(), testguest.MarkerDHCP)
	lease, err := testguest.ParseDHCP(args)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Address != tc.wantAddr {
		t.Errorf("leased address %s, want %s", lease.Address, tc.wantAddr)
	}
	if got := strings.Join(lease.Routers, ","); got != tc.wantRouter {
		t.Errorf("router %s, want %s", got, tc.wantRouter)
	}
	if got, want := strings.Join(lease.DNS, ","), strings.Join(dns, ","); got != want {
		t.Errorf("DNS servers %s, want the pod's %s", got, want)
	}
	if got, want := strings.Join(lease.Search, ","), strings.Join(search, ","); got != want {
		t.Errorf("search domains %s, want the pod's %s", got, want)
	}
	if tc.passt {
		if lease.MTU != passtMTU {
			t.Errorf("MTU %d, want passt's %d", lease.MTU, passtMTU)
		}
		if got := strings.Join(dns, ","); got != pod.PasstResolver.String() {
			t.Errorf("pod resolver %s, want %s (a resolver at the gateway is the pod's loopback to passt)", got, pod.PasstResolver)
		}
	} else {
		if lease.MTU != mtu {
			t.Errorf("MTU %d, want the pod's %d", lease.MTU, mtu)
		}
		if lease.Hostname != name {
			t.Errorf("hostname %q, want %q", lease.Hostname, name)
		}
	}
	if err := console.waitFor("VL-T-DONE", 2*time.Minute, done); err != nil {
		t.Fatal(err)
	}
	t.Logf("guest listening after %s", time.Since(begin).Round(time.Millisecond))
	page, ok := testguest.Between(console.String(), "VL-T-PAGE-BEGIN", "VL-T-PAGE-END")
	if !ok || !strings.Contains(page, "outside-"+token) {
		t.Errorf("guest did not fetch the outside page (NAT): got %q", page)
	}
	if tc.passt {
		ns, ok := testguest.Between(console.String(), "VL-T-NS-BEGIN", "VL-T-NS-END")
		if !ok || !strings.Contains(ns, "192.0.2.42") {
			t.Errorf("guest did not resolve vl-dns.test through %s: got %q", pod.PasstResolver, ns)
		}
	}

	if tc.secondary {
		out := console.String()
		if l, ok := testguest.FindMarker(out, "VL-T-ETH1-LEASE"); !ok || !strings.HasPrefix(l, secondaryPod+"/24 ") {
			t.Errorf("secondary interface lease %q, want %s/24", l, secondaryPod)
		}
		page1, ok := testguest.Between(out, "VL-T-PAGE1-BEGIN", "VL-T-PAGE1-END")
		if !ok || !strings.Contains(page1, "outside1-"+token) {
			t.Errorf("guest did not fetch the outside page on its secondary network: got %q", page1)
		}
		url1 := fmt.Sprintf("http://%s:%d/", secondaryPod, declared)
		if body, err := getIn(st.OutsideNS, url1); err != nil || strings.TrimSpace(body) != fmt.Sprintf("guest-%d-%s", declared, token) {
			t.Errorf("outside -> %s: %q, %v", url1, body, err)
		}
	}
	if tc.secondary {
		// The guest agent reports both interfaces' addresses; vlctl run
		// shows them (from the Domain status the launcher fills).
		want := []string{"eth0 " + strings.Split(tc.wantAddr, "/")[0], "eth1 " + secondaryPod}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			line := lastLine(status.String(), "vlctl: guest agent: ")
			if strings.Contains(line, want[0]) && strings.Contains(line, want[1]) {
				t.Logf("guest agent report: %s", line)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("vlctl run did not show the guest's two interfaces (%q) from its agent; status:\n%s", want, status)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if tc.ipv6 {
		page6, ok := testguest.Between(console.String(), "VL-T-PAGE6-BEGIN", "VL-T-PAGE6-END")
		if !ok || !strings.Contains(page6, "outside6-"+token) {
			t.Errorf("guest did not fetch the outside page over IPv6 (NAT66): got %q", page6)
		}
		url6 := fmt.Sprintf("http://[%s]:%d/", podAddr6, declared)
		if body, err := getIn(st.OutsideNS, url6); err != nil || strings.TrimSpace(body) != fmt.Sprintf("guest-%d-%s", declared, token) {
			t.Errorf("outside -> %s: %q, %v", url6, body, err)
		}
		addr6 := fmt.Sprintf("[%s]:%d", podAddr6, undeclared)
		if c, err := dialIn(context.Background(), st.OutsideNS, "tcp", addr6); err == nil {
			c.Close()
			t.Errorf("outside -> %s: connected, but port %d is not declared", addr6, undeclared)
		}
	}

	// Inbound: the outside reaches the guest's declared port at the pod address.
	url := fmt.Sprintf("http://%s:%d/", st.PodAddress, declared)
	if body, err := getIn(st.OutsideNS, url); err != nil || strings.TrimSpace(body) != fmt.Sprintf("guest-%d-%s", declared, token) {
		t.Errorf("outside -> %s: %q, %v", url, body, err)
	}
	if tc.binding == "masquerade" {
		// From inside the pod, its own address reaches the guest too.
		if body, err := getIn(podNS, url); err != nil || strings.TrimSpace(body) != fmt.Sprintf("guest-%d-%s", declared, token) {
			t.Errorf("pod -> %s: %q, %v", url, body, err)
		}
	}
	if tc.checkUndeclared {
		// The guest does listen there (seen from the pod, on its own
		// address), so only the missing forward can stop the outside.
		// Under passt the guest has the pod's address: its listening is
		// on the console (VL-T-LISTENING) instead.
		inPod := fmt.Sprintf("http://%s:%d/", strings.Split(tc.wantAddr, "/")[0], undeclared)
		if tc.passt {
			if !strings.Contains(console.String(), "VL-T-LISTENING") {
				t.Errorf("the guest did not start its web servers")
			}
		} else if body, err := getIn(podNS, inPod); err != nil || strings.TrimSpace(body) != fmt.Sprintf("guest-%d-%s", undeclared, token) {
			t.Errorf("pod -> %s: %q, %v (the guest should listen there)", inPod, body, err)
		}
		addr := fmt.Sprintf("%s:%d", st.PodAddress, undeclared)
		if c, err := dialIn(context.Background(), st.OutsideNS, "tcp", addr); err == nil {
			c.Close()
			t.Errorf("outside -> %s: connected, but port %d is not declared", addr, undeclared)
		}
	}

	// Ctrl-C: the guest is asked to power off and everything goes.
	stopAt := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("run did not end within 3 min of the interruption")
	}
	t.Logf("run ended %s after the interruption", time.Since(stopAt).Round(time.Millisecond))
	out := console.String()
	for _, m := range []string{testguest.MarkerPowerButton, testguest.MarkerPowerOff} {
		if !strings.Contains(out, m) {
			t.Errorf("guest did not print %s: not a graceful shutdown (or the console was cut: run.go closes it 3 s after the interruption)", m)
		}
	}
	if runErr != nil {
		t.Errorf("run after Ctrl-C: %v, want nil", runErr)
	}
	checkNothingLeft(t, root, st.WorkDir, inodes, tablesBefore)
}

func randomToken(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// podResolvConf reads the nameservers and search domains of the resolv.conf
// the run made for its pod.
func podResolvConf(t *testing.T, workDir string) (dns, search []string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(workDir, "resolv.conf*"))
	if len(files) != 1 {
		t.Fatalf("pod resolv.conf in %s: found %v", workDir, files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			dns = append(dns, fields[1])
		case "search":
			search = fields[1:]
		}
	}
	if len(dns) == 0 || len(search) == 0 {
		t.Fatalf("pod resolv.conf %s has no nameserver or no search line", files[0])
	}
	return dns, search
}

// podMTU is the MTU of the pod's eth0.
func podMTU(t *testing.T, podNS string) int {
	t.Helper()
	var mtu int
	err := inNamedNS(podNS, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		mtu = l.Attrs().MTU
		return nil
	})
	if err != nil {
		t.Fatalf("pod eth0: %v", err)
	}
	return mtu
}

func nftTables(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v %s", err, out)
	}
	return string(out)
}

// checkNothingLeft: no work dir, no namespace (neither pinned nor held by
// any process, so with it every link, address and nft rule inside it is
// gone), no nft table in the root namespace, no process of the run.
func checkNothingLeft(t *testing.T, root, workDir string, inodes map[string]uint64, tablesBefore string) {
	t.Helper()
	if _, err := os.Stat(workDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work dir %s still there (%v)", workDir, err)
	}
	if ents, _ := os.ReadDir(root); len(ents) > 0 {
		t.Errorf("work root %s not empty: %v", root, ents)
	}
	for ns := range inodes {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still pinned (%v)", ns, err)
		}
	}
	if after := nftTables(t); after != tablesBefore {
		t.Errorf("root namespace nft tables changed:\nbefore %s\nafter  %s", tablesBefore, after)
	}
	for _, p := range leftovers(workDir, inodes) {
		t.Errorf("left behind: %s", p)
	}
}

// leftovers lists processes whose command line or working directory names
// workDir, or that are in or hold one of the namespaces (by inode), and
// mounts of those namespaces.
func leftovers(workDir string, inodes map[string]uint64) []string {
	nsLink := map[string]string{}
	for name, ino := range inodes {
		nsLink["net:["+strconv.FormatUint(ino, 10)+"]"] = name
	}
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name())
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cmd := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(cmd, workDir) {
			out = append(out, fmt.Sprintf("process %d (%s) names the work dir", pid, trim(cmd)))
			continue
		}
		if cwd, _ := os.Readlink(filepath.Join(dir, "cwd")); strings.HasPrefix(cwd, workDir) {
			out = append(out, fmt.Sprintf("process %d (%s) works in %s", pid, trim(cmd), cwd))
			continue
		}
		if l, _ := os.Readlink(filepath.Join(dir, "ns", "net")); nsLink[l] != "" {
			out = append(out, fmt.Sprintf("process %d (%s) is in namespace %s", pid, trim(cmd), nsLink[l]))
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join(dir, "fd", fd.Name())); nsLink[l] != "" {
				out = append(out, fmt.Sprintf("process %d (%s) holds namespace %s", pid, trim(cmd), nsLink[l]))
				break
			}
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		for name := range inodes {
			if strings.Contains(line, "/"+name+" ") {
				out = append(out, "mount "+line)
			}
		}
	}
	return out
}

// lastLine is the last line of s that holds marker ("" if none).
func lastLine(s, marker string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], marker) {
			return lines[i]
		}
	}
	return ""
}

func trim(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
