package conformance

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// guestAgentChannel is the virtio channel KubeVirt gives every guest and
// virt-handler reads for the AgentConnected condition (pkg/virt-handler
// vm.go guestAgentConnected: Target.Name and Target.State "connected").
const guestAgentChannel = "org.qemu.guest_agent.0"

// agentChannelState is the Target.State of the guest agent channel, and
// whether the Domain has that channel at all.
func agentChannelState(d *kvshape.Domain) (string, bool) {
	for _, c := range d.Spec.Devices.Channels {
		if c.Target != nil && c.Target.Name == guestAgentChannel {
			return c.Target.State, true
		}
	}
	return "", false
}

// checkAgentDisconnected: the test guest runs no guest agent, so the
// running Domain reports its channel "disconnected", and the three agent
// RPCs virt-handler calls answer as KubeVirt's launcher does with no agent
// data (virtwrap/manager.go, cmd-server/server.go): success with empty
// JSON, which decodes strictly into KubeVirt's own types.
func checkAgentDisconnected(t *testing.T, h *handler, data string) {
	t.Helper()
	d, err := kvshape.Decode([]byte(data))
	if err != nil {
		t.Fatalf("GetDomain: %v", err)
	}
	if st, ok := agentChannelState(d); !ok {
		t.Errorf("GetDomain has no %s channel; channels %+v", guestAgentChannel, d.Spec.Devices.Channels)
	} else if st != "disconnected" {
		t.Errorf("%s channel state %q, want disconnected (the guest runs no agent)", guestAgentChannel, st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	gi, err := h.cmd.GetGuestInfo(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetGuestInfo", gi.GetResponse(), err); err != nil {
		t.Errorf("%v (KubeVirt answers success without agent data)", err)
	} else if info, err := kvshape.DecodeGuestInfo([]byte(gi.GuestInfoResponse)); err != nil {
		t.Errorf("GetGuestInfo: %v\n%s", err, gi.GuestInfoResponse)
	} else if info.GAVersion != "" || info.Hostname != "" || len(info.SupportedCommands) != 0 || info.Timezone != ", 0" ||
		len(info.UserList) != 0 || len(info.FSInfo.Filesystems) != 0 || info.OS.Name != "" {
		t.Errorf("GetGuestInfo without an agent = %s, want KubeVirt's empty info", gi.GuestInfoResponse)
	}

	us, err := h.cmd.GetUsers(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetUsers", us.GetResponse(), err); err != nil {
		t.Errorf("%v (KubeVirt answers success without agent data)", err)
	} else if users, err := kvshape.DecodeUsers([]byte(us.GuestUserListResponse)); err != nil || users == nil || len(users) != 0 {
		t.Errorf("GetUsers = %q (%v), want KubeVirt's []", us.GuestUserListResponse, err)
	}

	fs, err := h.cmd.GetFilesystems(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetFilesystems", fs.GetResponse(), err); err != nil {
		t.Errorf("%v (KubeVirt answers success without agent data)", err)
	} else if list, err := kvshape.DecodeFilesystems([]byte(fs.GuestFilesystemsResponse)); err != nil || list == nil || len(list) != 0 {
		t.Errorf("GetFilesystems = %q (%v), want KubeVirt's []", fs.GuestFilesystemsResponse, err)
	}
}

// requiredAgentCommands are the commands virt-handler needs the agent to
// have enabled, or it sets AgentVersionNotSupported (KubeVirt's
// pkg/virt-handler/guestagent.go requiredGuestAgentCommands).
var requiredAgentCommands = []string{
	"guest-ping", "guest-get-time", "guest-info", "guest-shutdown", "guest-network-get-interfaces",
	"guest-get-fsinfo", "guest-get-host-name", "guest-get-users", "guest-get-timezone", "guest-get-osinfo",
}

// TestGuestAgent: the test guest runs Debian's qemu-guest-agent. The
// launcher reports its channel connected, polls it, and gives its data
// where virt-handler reads it: the Domain status (the interface with the
// address the guest got by DHCP and its MAC, the OS, the freeze state) in
// an event and in GetDomain, and GetGuestInfo, GetUsers, GetFilesystems in
// KubeVirt's types, with every command virt-handler requires. Pausing
// stops the polling, unpausing starts it again; an agent that goes away
// is reported disconnected, and connected again when it comes back.
func TestGuestAgent(t *testing.T) {
	t.Parallel()
	p := startPod(t, "conf-agent", true)
	// The guest asks the launcher's DHCP server for its address.
	p.ExtraUserData = []string{"ip link set eth0 up", "udhcpc -i eth0 -s /etc/udhcpc.script -q -n -t 10 -T 2 >/dev/null 2>&1"}
	h, s := start(t, p)
	vmiJSON := handlerVMI(t, p)
	if err := h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON); err != nil {
		t.Fatalf("%v", err)
	}
	port := p.WaitConsole(testguest.MarkerAgent, bootTimeout)
	lease, err := testguest.ParseDHCP(p.WaitConsole(testguest.MarkerDHCP, bootTimeout))
	launchertest.Must(t, err)
	guestIP := strings.Split(lease.Address, "/")[0]

	connected := s.wait(t, 0, "agent channel connected", bootTimeout, func(d *kvshape.Domain) bool {
		st, _ := agentChannelState(d)
		return st == "connected"
	})
	// The poller's first round runs at once; the interfaces come with the
	// sys group, the freeze state every 5 s.
	withData := s.wait(t, connected, "agent data in the Domain status", 60*time.Second, func(d *kvshape.Domain) bool {
		return d.Status.OSInfo.Name != "" && d.Status.FSFreezeStatus.Status != "" && len(d.Status.Interfaces) > 0 &&
			d.Status.Interfaces[0].Ip != ""
	})
	ev := s.event(withData)
	if ev.Type != "MODIFIED" {
		t.Errorf("agent data came in a %s event, want MODIFIED", ev.Type)
	}
	checkAgentStatus(t, ev.Domain, guestIP, "event")
	d, err := h.getDomain(t)
	launchertest.Must(t, err)
	dom, err := kvshape.Decode([]byte(d))
	launchertest.Must(t, err)
	checkAgentStatus(t, dom, guestIP, "GetDomain")

	// The host name and time zone come in the round that brought the
	// Domain data (before it), or the guest had not set its host name yet
	// then: the next round (within 20 s) has it.
	info := guestInfo(t, h)
	for deadline := time.Now().Add(30 * time.Second); info.Hostname != lease.Hostname && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		info = guestInfo(t, h)
	}
	if info.GAVersion == "" {
		t.Errorf("GetGuestInfo has no guestAgentVersion")
	}
	enabled := map[string]bool{}
	for _, c := range info.SupportedCommands {
		enabled[c.Name] = c.Enabled
	}
	for _, c := range requiredAgentCommands {
		if !enabled[c] {
			t.Errorf("GetGuestInfo: %s is not an enabled command (virt-handler would report AgentVersionNotSupported); commands %v", c, info.SupportedCommands)
		}
	}
	if info.OS.ID != testguest.OSID || info.OS.Name != testguest.OSName || info.OS.VersionID != testguest.OSVersionID || info.OS.Machine != "x86_64" || info.OS.KernelRelease == "" {
		t.Errorf("GetGuestInfo OS %+v, want the test guest's os-release (%s %s %s) on x86_64", info.OS, testguest.OSID, testguest.OSName, testguest.OSVersionID)
	}
	// The guest takes the host name the launcher's DHCP server offers.
	if info.Hostname != lease.Hostname || info.Hostname == "" {
		t.Errorf("GetGuestInfo hostname %q, want %q (the DHCP lease's)", info.Hostname, lease.Hostname)
	}
	if info.Timezone != "UTC, 0" {
		t.Errorf("GetGuestInfo timezone %q, want the guest's \"UTC, 0\"", info.Timezone)
	}
	if info.FSFreezeStatus != "thawed" {
		t.Errorf("GetGuestInfo fsFreezeStatus %q, want thawed", info.FSFreezeStatus)
	}
	if t.Failed() {
		b, _ := json.Marshal(info)
		t.Logf("GetGuestInfo: %s", b)
	}
	if !hasRootFS(info.FSInfo.Filesystems) {
		t.Errorf("GetGuestInfo file systems %+v, want the root disk's ext4 at /mnt/root", info.FSInfo.Filesystems)
	}

	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	fs, err := h.cmd.GetFilesystems(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetFilesystems", fs.GetResponse(), err); err != nil {
		t.Errorf("%v", err)
	} else if list, err := kvshape.DecodeFilesystems([]byte(fs.GuestFilesystemsResponse)); err != nil || !hasRootFS(list) {
		t.Errorf("GetFilesystems = %s (%v), want the root disk's ext4 at /mnt/root", fs.GuestFilesystemsResponse, err)
	}
	// Nobody logs in to the test guest: an empty list, not null.
	us, err := h.cmd.GetUsers(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetUsers", us.GetResponse(), err); err != nil {
		t.Errorf("%v", err)
	} else if users, err := kvshape.DecodeUsers([]byte(us.GuestUserListResponse)); err != nil || users == nil {
		t.Errorf("GetUsers = %q (%v), want a list", us.GuestUserListResponse, err)
	}

	checkProbes(t, h, p)
	checkFreeze(t, h, s, p, vmiJSON)

	// Pause stops the polling, unpause starts it again.
	starts := func() int { return strings.Count(p.Stderr.String(), "guest agent connected: polling it") }
	if n := starts(); n != 1 {
		t.Errorf("the poller started %d times before the pause, want 1", n)
	}
	launchertest.Must(t, h.vmiCall(t, "PauseVirtualMachine", h.cmd.PauseVirtualMachine, vmiJSON))
	paused := s.wait(t, withData, "Paused", 30*time.Second, func(d *kvshape.Domain) bool { return d.Status.Status == "Paused" })
	waitLog(t, p, "guest agent polling stopped", 10*time.Second)
	launchertest.Must(t, h.vmiCall(t, "UnpauseVirtualMachine", h.cmd.UnpauseVirtualMachine, vmiJSON))
	resumed := s.wait(t, paused, "Running again", 30*time.Second, func(d *kvshape.Domain) bool { return d.Status.Status == "Running" })
	// The guest's clock is set after the unpause.
	waitLog(t, p, "guest time set after unpause", 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for starts() < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := starts(); n != 2 {
		t.Errorf("the poller started %d times after the unpause, want 2", n)
	}

	// The agent goes away (killed on the guest's console shell) and comes
	// back: the channel follows, in events.
	typeOnConsole(t, p, "killall qemu-ga\n")
	gone := s.wait(t, resumed, "agent channel disconnected", 60*time.Second, func(d *kvshape.Domain) bool {
		st, _ := agentChannelState(d)
		return st == "disconnected"
	})
	waitLog(t, p, "guest agent polling stopped", 10*time.Second)
	// Without its agent the ping probe fails with a gRPC error and a
	// GuestAgentPingFailed warning on the VMI.
	pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
	_, err = h.cmd.GuestPing(pctx, &cmdv1.GuestPingRequest{DomainName: p.DomainName(), TimeoutSeconds: 10})
	pcancel()
	if err == nil {
		t.Errorf("GuestPing succeeded with the agent gone")
	} else {
		t.Logf("GuestPing without the agent: %v", err)
	}
	waitK8sEvent(t, s, "GuestAgentPingFailed", 10*time.Second)
	typeOnConsole(t, p, "LD_LIBRARY_PATH=/lib/x86_64-linux-gnu "+testguest.AgentPath+" -m virtio-serial -p "+strings.TrimSpace(port)+" -t /run -l /run/qemu-ga.log &\n")
	s.wait(t, gone, "agent channel connected again", 60*time.Second, func(d *kvshape.Domain) bool {
		st, _ := agentChannelState(d)
		return st == "connected"
	})

	launchertest.Must(t, h.vmiCall(t, "KillVirtualMachine", h.cmd.KillVirtualMachine, vmiJSON))
	launchertest.Must(t, h.vmiCall(t, "DeleteVirtualMachine", h.cmd.DeleteVirtualMachine, vmiJSON))
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Errorf("monitor exit status %d, want 0", code)
	}
	p.AssertNothingLeft()
}

// checkAgentStatus: the Domain carries the agent's interface list (eth0
// with the DHCP address and the domain interface's MAC, no loopback), its
// OS and the freeze state.
func checkAgentStatus(t *testing.T, d *kvshape.Domain, guestIP, where string) {
	t.Helper()
	if len(d.Spec.Devices.Interfaces) != 1 || d.Spec.Devices.Interfaces[0].MAC == nil {
		t.Fatalf("%s: domain interfaces %+v, want one with a MAC", where, d.Spec.Devices.Interfaces)
	}
	mac := d.Spec.Devices.Interfaces[0].MAC.MAC
	ifs := d.Status.Interfaces
	if len(ifs) != 1 || ifs[0].InterfaceName != "eth0" || !strings.EqualFold(ifs[0].Mac, mac) || ifs[0].Ip != guestIP || !slices.Contains(ifs[0].IPs, guestIP) {
		t.Errorf("%s: Status.Interfaces %+v, want eth0 with MAC %s and address %s (and no lo)", where, ifs, mac, guestIP)
	}
	if d.Status.OSInfo.Id != testguest.OSID || d.Status.OSInfo.Name != testguest.OSName {
		t.Errorf("%s: Status.OSInfo %+v, want the test guest's (%s, %s)", where, d.Status.OSInfo, testguest.OSID, testguest.OSName)
	}
	if d.Status.FSFreezeStatus.Status != "thawed" {
		t.Errorf("%s: Status.FSFreezeStatus %q, want thawed", where, d.Status.FSFreezeStatus.Status)
	}
}

func guestInfo(t *testing.T, h *handler) *v1.VirtualMachineInstanceGuestAgentInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	gi, err := h.cmd.GetGuestInfo(ctx, &cmdv1.EmptyRequest{})
	if err := failure(t, "GetGuestInfo", gi.GetResponse(), err); err != nil {
		t.Fatalf("%v", err)
	}
	info, err := kvshape.DecodeGuestInfo([]byte(gi.GuestInfoResponse))
	if err != nil {
		t.Fatalf("GetGuestInfo: %v\n%s", err, gi.GuestInfoResponse)
	}
	return info
}

func hasRootFS(list []v1.VirtualMachineInstanceFileSystem) bool {
	for _, f := range list {
		if f.MountPoint == "/mnt/root" && f.FileSystemType == "ext4" && f.TotalBytes > 0 {
			return true
		}
	}
	return false
}

// typeOnConsole writes to the guest's serial console (its shell).
func typeOnConsole(t *testing.T, p *pod, text string) {
	t.Helper()
	c, err := net.DialTimeout("unix", p.Layout.SerialSocket(p.UID), 5*time.Second)
	launchertest.Must(t, err)
	defer c.Close()
	launchertest.Must(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Write([]byte(text))
	launchertest.Must(t, err)
	// Let QEMU hand the bytes to the guest before the connection closes.
	time.Sleep(500 * time.Millisecond)
}

// waitLog waits for a line of the launcher's log.
func waitLog(t *testing.T, p *pod, text string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Stderr.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the launcher's log after %v", text, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkProbes: virt-handler's exec and guestAgentPing probes through the
// real agent: output and exit codes as KubeVirt reports them, a command
// that outlives its timeout is an error, and a ping answers.
func checkProbes(t *testing.T, h *handler, p *pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exec := func(timeout int32, cmd string, args ...string) (*cmdv1.ExecResponse, error) {
		return h.cmd.Exec(ctx, &cmdv1.ExecRequest{DomainName: p.DomainName(), Command: cmd, Args: args, TimeoutSeconds: timeout})
	}
	if r, err := exec(10, "/bin/sh", "-c", `echo "probe $((6*7))"; exit 0`); err != nil ||
		!r.GetResponse().GetSuccess() || r.ExitCode != 0 || r.StdOut != "probe 42\n" {
		t.Errorf("Exec echo = %+v, %v; want success, exit 0, %q", r, err, "probe 42\n")
	}
	if r, err := exec(10, "/bin/sh", "-c", "echo failing; exit 3"); err != nil || !r.GetResponse().GetSuccess() || r.ExitCode != 3 || r.StdOut != "failing\n" {
		t.Errorf("Exec exit 3 = %+v, %v; want success with exit code 3 (KubeVirt's answer)", r, err)
	}
	t0 := time.Now()
	if r, err := exec(2, "/bin/sleep", "30"); err == nil || status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("Exec of a command outliving its 2 s timeout = %+v, %v; want a gRPC error saying it timed out", r, err)
	} else if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Exec with a 2 s timeout took %v", d)
	}
	if r, err := exec(5, "/no/such/command"); err == nil {
		t.Errorf("Exec of a missing command = %+v, want an error", r)
	}
	if r, err := h.cmd.GuestPing(ctx, &cmdv1.GuestPingRequest{DomainName: p.DomainName(), TimeoutSeconds: 5}); err != nil || !r.GetResponse().GetSuccess() {
		t.Errorf("GuestPing = %+v, %v; want success", r, err)
	}
	if _, err := h.cmd.GuestPing(ctx, &cmdv1.GuestPingRequest{DomainName: "other_vm", TimeoutSeconds: 5}); err == nil {
		t.Errorf("GuestPing for another domain succeeded")
	}
}

// waitK8sEvent waits for a Kubernetes event with reason on the notify
// stream.
func waitK8sEvent(t *testing.T, s *notifyServer, reason string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, e := range s.k8sEvents() {
			if strings.Contains(e, reason) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s K8s event after %v; events %q", reason, timeout, s.k8sEvents())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkFreeze: Freeze and Unfreeze through the agent (the guest's ext4
// root disk is frozen: the freeze state goes to the Domain, writes wait
// for the thaw), both idempotent, and KubeVirt's automatic thaw after
// unfreezeTimeoutSeconds.
func checkFreeze(t *testing.T, h *handler, s *notifyServer, p *pod, vmiJSON []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	freeze := func(timeout int32) error {
		r, err := h.cmd.FreezeVirtualMachine(ctx, &cmdv1.FreezeRequest{Vmi: &cmdv1.VMI{VmiJson: vmiJSON}, UnfreezeTimeoutSeconds: timeout})
		return failure(t, "FreezeVirtualMachine", r, err)
	}
	state := func(want string) func(*kvshape.Domain) bool {
		return func(d *kvshape.Domain) bool { return d.Status.FSFreezeStatus.Status == want }
	}
	evs, _ := s.snapshot()
	from := len(evs)
	launchertest.Must(t, freeze(0))
	launchertest.Must(t, freeze(0)) // frozen already: nothing to do
	frozen := s.wait(t, from, "FSFreezeStatus frozen", 20*time.Second, state("frozen"))
	if info := guestInfo(t, h); info.FSFreezeStatus != "frozen" {
		t.Errorf("GetGuestInfo fsFreezeStatus %q after Freeze, want frozen", info.FSFreezeStatus)
	}
	// A write to the frozen disk blocks until the thaw. (The console's
	// shell writes: a frozen agent refuses guest-exec. The marker is
	// computed so that the echo of the typed line does not match it.)
	const written = "VL-T-FROZEN-2WRITTEN"
	typeOnConsole(t, p, "echo frozen-write >/mnt/root/frozen-write; sync; echo VL-T-FROZEN-$((1+1))WRITTEN\n")
	time.Sleep(3 * time.Second)
	if strings.Contains(p.Console(), written) {
		t.Errorf("a write to the frozen root disk went through; console:\n%s", launchertest.Tail(p.Console(), 2000))
	}
	for range 2 { // thawed already the second time: nothing to do
		launchertest.Must(t, h.vmiCall(t, "UnfreezeVirtualMachine", h.cmd.UnfreezeVirtualMachine, vmiJSON))
	}
	thawed := s.wait(t, frozen, "FSFreezeStatus thawed", 20*time.Second, state("thawed"))
	p.WaitConsole(written, 20*time.Second) // the blocked write ends with the thaw
	// Frozen with a 3 s timeout and never unfrozen: the launcher thaws.
	launchertest.Must(t, freeze(3))
	refrozen := s.wait(t, thawed, "FSFreezeStatus frozen again", 20*time.Second, state("frozen"))
	waitLog(t, p, "unfreeze was not asked for in time", 20*time.Second)
	s.wait(t, refrozen, "FSFreezeStatus thawed by the launcher", 20*time.Second, state("thawed"))
}

// TestShutdownThroughAgent: Shutdown and SoftReboot go through the guest
// agent when it is connected, as KubeVirt's do (libvirt's default shutdown
// asks the agent first; the reboot is the agent's), and a hung agent
// neither hangs Shutdown past its bound nor keeps Kill from ending the
// guest at once.
func TestShutdownThroughAgent(t *testing.T) {
	t.Parallel()
	t.Run("works", func(t *testing.T) {
		t.Parallel()
		p := startPod(t, "conf-gashut", false)
		h, s := start(t, p)
		vmiJSON := handlerVMI(t, p, testguest.OptAgentShutdown)
		launchertest.Must(t, h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON))
		waitAgent := func(from int) int {
			return s.wait(t, from, "agent channel connected", bootTimeout, func(d *kvshape.Domain) bool {
				st, _ := agentChannelState(d)
				return st == "connected"
			})
		}
		connected := waitAgent(0)
		launchertest.Must(t, h.vmiCall(t, "SoftRebootVirtualMachine", h.cmd.SoftRebootVirtualMachine, vmiJSON))
		p.WaitConsole(testguest.MarkerAgentReboot, 30*time.Second)
		deadline := time.Now().Add(bootTimeout)
		for testguest.CountMarker(p.Console(), testguest.MarkerReady) < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the guest did not boot again after the agent's reboot; console:\n%s", launchertest.Tail(p.Console(), 4000))
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The reboot dropped the agent; it connects again.
		gone := s.wait(t, connected, "agent channel disconnected by the reboot", 30*time.Second, func(d *kvshape.Domain) bool {
			st, _ := agentChannelState(d)
			return st == "disconnected"
		})
		waitAgent(gone)
		launchertest.Must(t, h.vmiCall(t, "ShutdownVirtualMachine", h.cmd.ShutdownVirtualMachine, vmiJSON))
		s.wait(t, gone, "Shutoff", 60*time.Second, func(d *kvshape.Domain) bool { return d.Status.Status == "Shutoff" })
		out := p.Console()
		if testguest.CountMarker(out, testguest.MarkerAgentShutdown) != 1 || testguest.CountMarker(out, testguest.MarkerPowerButton) != 0 {
			t.Errorf("the guest was not powered off by its agent alone; console:\n%s", launchertest.Tail(out, 4000))
		}
		launchertest.Must(t, h.vmiCall(t, "DeleteVirtualMachine", h.cmd.DeleteVirtualMachine, vmiJSON))
		if code := p.ExitCode(60 * time.Second); code != 0 {
			t.Errorf("monitor exit status %d, want 0", code)
		}
		p.AssertNothingLeft()
	})
	t.Run("hung agent", func(t *testing.T) {
		t.Parallel()
		p := startPod(t, "conf-gahang", false)
		h, s := start(t, p)
		vmiJSON := handlerVMI(t, p, testguest.OptAgentShutdownHang)
		launchertest.Must(t, h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON))
		s.wait(t, 0, "agent channel connected", bootTimeout, func(d *kvshape.Domain) bool {
			st, _ := agentChannelState(d)
			return st == "connected"
		})
		t0 := time.Now()
		err := h.vmiCall(t, "ShutdownVirtualMachine", h.cmd.ShutdownVirtualMachine, vmiJSON)
		took := time.Since(t0)
		p.WaitConsole(testguest.MarkerAgentShutdownHang, 30*time.Second)
		t.Logf("Shutdown with a hung agent: %v after %v", err, took)
		if took > 20*time.Second {
			t.Errorf("Shutdown with a hung agent took %v: it must give up within its bound", took)
		}
		if err != nil {
			t.Errorf("Shutdown with a hung agent: %v; want the power button pressed instead", err)
		}
		// The handler kills once the grace period is over: at once, though
		// the daemon still waits for the agent.
		before, _ := s.snapshot() // the define's event is Shutoff too
		t0 = time.Now()
		launchertest.Must(t, h.vmiCall(t, "KillVirtualMachine", h.cmd.KillVirtualMachine, vmiJSON))
		s.wait(t, len(before), "Shutoff after Kill", 30*time.Second, func(d *kvshape.Domain) bool { return d.Status.Status == "Shutoff" })
		if d := time.Since(t0); d > 15*time.Second {
			t.Errorf("Kill took %v with a hung agent", d)
		}
		launchertest.Must(t, h.vmiCall(t, "DeleteVirtualMachine", h.cmd.DeleteVirtualMachine, vmiJSON))
		if code := p.ExitCode(60 * time.Second); code != 0 {
			t.Errorf("monitor exit status %d, want 0", code)
		}
		p.AssertNothingLeft()
	})
}

// TestAccessCredentials: the VMI's accessCredentials with propagation
// method qemuGuestAgent reach the guest through its agent, from the
// secrets the pod mounts (<secret>-access-cred): the user's authorized SSH
// keys (and again when the secret changes), with which the user logs in
// over SSH at the pod's masquerade address (a login with a terminal then
// shows in the agent's user list), and its password. The outcome
// is in the Domain's metadata, where virt-handler reads it for the
// AccessCredentialsSynchronized condition: "Guest agent is offline" before
// the agent is up, then success. With the agent's key commands disabled
// (as an agent older than 5.2 is) the keys go through KubeVirt's
// file-based fallback, with its warning on the VMI.
func TestAccessCredentials(t *testing.T) {
	t.Parallel()
	t.Run("agent", func(t *testing.T) {
		t.Parallel()
		checkAccessCredentials(t, "conf-creds", false)
	})
	t.Run("file fallback", func(t *testing.T) {
		t.Parallel()
		checkAccessCredentials(t, "conf-credf", true)
	})
}

func checkAccessCredentials(t *testing.T, name string, fallback bool) {
	one, key1 := sshKey(t, "one@example")
	two, key2 := sshKey(t, "two@example")
	const password = "s3cret-Pa55"
	var keysDir string
	// The secrets as the kubelet mounts them: <secret>-access-cred.
	p := startPodAfter(t, name, true, func(p *pod) {
		// The private dir is the launcher's (an emptyDir in a pod); the
		// secret volumes mounted in it stay root's, read-only.
		launchertest.Must(t, os.MkdirAll(p.Layout.PrivateDir, 0o700))
		launchertest.Must(t, os.Chown(p.Layout.PrivateDir, int(env.Cred.Uid), int(env.Cred.Gid)))
		keysDir = p.Layout.SecretSource("vl-keys-access-cred")
		passDir := p.Layout.SecretSource("vl-pass-access-cred")
		for _, d := range []string{keysDir, passDir} {
			launchertest.Must(t, os.MkdirAll(d, 0o755))
		}
		launchertest.Must(t, os.WriteFile(filepath.Join(keysDir, "key1"), []byte(key1+"\n"), 0o644))
		launchertest.Must(t, os.WriteFile(filepath.Join(passDir, testguest.GuestUser), []byte(password+"\n"), 0o644))
	})
	// The guest asks the launcher's DHCP server for its address.
	p.ExtraUserData = []string{"ip link set eth0 up", "udhcpc -i eth0 -s /etc/udhcpc.script -q -n -t 10 -T 2 >/dev/null 2>&1"}
	h, s := start(t, p)
	var args []string
	if fallback {
		args = append(args, testguest.OptAgentBlock("guest-ssh-add-authorized-keys", "guest-ssh-remove-authorized-keys"))
	}
	v, err := loadVMI(p.VMIYAML(p.Name, args...))
	launchertest.Must(t, err)
	ga := &v1.QemuGuestAgentSSHPublicKeyAccessCredentialPropagation{Users: []string{testguest.GuestUser}}
	v.Spec.AccessCredentials = []v1.AccessCredential{
		{SSHPublicKey: &v1.SSHPublicKeyAccessCredential{
			Source:            v1.SSHPublicKeyAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "vl-keys"}},
			PropagationMethod: v1.SSHPublicKeyAccessCredentialPropagationMethod{QemuGuestAgent: ga},
		}},
		{UserPassword: &v1.UserPasswordAccessCredential{
			Source:            v1.UserPasswordAccessCredentialSource{Secret: &v1.AccessCredentialSecretSource{SecretName: "vl-pass"}},
			PropagationMethod: v1.UserPasswordAccessCredentialPropagationMethod{QemuGuestAgent: &v1.QemuGuestAgentUserPasswordAccessCredentialPropagation{}},
		}},
	}
	vmiJSON, err := json.Marshal(v)
	launchertest.Must(t, err)
	launchertest.Must(t, h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON))

	credentials := func(ok bool, message string) func(*kvshape.Domain) bool {
		return func(d *kvshape.Domain) bool {
			ac := d.Spec.Metadata.KubeVirt.AccessCredential
			return ac != nil && ac.Succeeded == ok && strings.Contains(ac.Message, message)
		}
	}
	s.wait(t, 0, "AccessCredential: Guest agent is offline", bootTimeout, credentials(false, "Guest agent is offline"))
	synced := s.wait(t, 0, "AccessCredential succeeded", bootTimeout+30*time.Second, credentials(true, ""))
	p.WaitConsole(testguest.MarkerPasswordSet+" "+testguest.GuestUser, 10*time.Second)
	const deprecated = "Used deprecated method to set SSH keys"
	if fallback {
		waitK8sEvent(t, s, deprecated, 10*time.Second)
		waitLog(t, p, `"keyFileFallback":true`, 10*time.Second)
	} else if slices.ContainsFunc(s.k8sEvents(), func(e string) bool { return strings.Contains(e, deprecated) }) {
		t.Errorf("the deprecated-method warning went out though the agent set the keys itself: %q", s.k8sEvents())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	guestSh := func(script string, args ...string) (string, int32) {
		t.Helper()
		r, err := h.cmd.Exec(ctx, &cmdv1.ExecRequest{DomainName: p.DomainName(), Command: "/bin/sh",
			Args: append([]string{"-c", script, "sh"}, args...), TimeoutSeconds: 10})
		if err != nil {
			t.Fatalf("Exec %q: %v", script, err)
		}
		return r.StdOut, r.ExitCode
	}
	authorized := "/home/" + testguest.GuestUser + "/.ssh/authorized_keys"
	if out, _ := guestSh("cat " + authorized); strings.TrimSpace(out) != key1 {
		t.Errorf("%s in the guest = %q, want the secret's key", authorized, out)
	}
	if out, _ := guestSh("stat -c '%u %a' " + authorized); strings.TrimSpace(out) != "1000 600" {
		t.Errorf("%s owner and mode %q, want the user's (1000), 600", authorized, out)
	}
	// The key logs the user in over SSH at the pod's address (masquerade
	// forwards port 22); the other key does not, yet.
	if out, err := sshRun(t, p, one, "id -un"); err != nil || strings.TrimSpace(out) != testguest.GuestUser {
		t.Errorf("ssh with the injected key: %q, %v; want %s logged in", out, err, testguest.GuestUser)
	}
	if out, err := sshRun(t, p, two, "id -un"); err == nil {
		t.Errorf("ssh with a key not in the secret logged in (%q): the login checks nothing", out)
	}
	if fallback {
		// The blocked commands show as disabled, as virt-handler reads
		// them (a required one disabled is AgentVersionNotSupported).
		for _, c := range guestInfo(t, h).SupportedCommands {
			if c.Name == "guest-ssh-add-authorized-keys" && c.Enabled {
				t.Errorf("GetGuestInfo: %s enabled, but the agent runs with it blocked", c.Name)
			}
		}
	} else {
		// A login with a terminal is in the guest's utmp: the agent's
		// user list has it at the next users poll (10 s).
		logout := sshLogin(t, p, one)
		checkLoggedIn(t, h, testguest.GuestUser)
		logout()
	}
	// The password is the secret's: its crypt hash in /etc/shadow matches.
	verify := `h=$(grep "^` + testguest.GuestUser + `:" /etc/shadow | cut -d: -f2); salt=$(echo "$h" | cut -d'$' -f3); [ "$(mkpasswd -m sha512 -S "$salt" "$1")" = "$h" ]`
	if _, code := guestSh(verify, password); code != 0 {
		t.Errorf("the guest's password for %s is not the secret's (exit %d)", testguest.GuestUser, code)
	}
	if _, code := guestSh(verify, "not-"+password); code == 0 {
		t.Errorf("the password check passes with a wrong password: it checks nothing")
	}

	// A key added to the secret reaches the guest at the next check.
	launchertest.Must(t, os.WriteFile(filepath.Join(keysDir, "key2"), []byte(key2+"\n"), 0o644))
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := guestSh("cat " + authorized)
		if strings.Contains(out, key1) && strings.Contains(out, key2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q 60 s after key2 was added to the secret", authorized, out)
		}
		time.Sleep(2 * time.Second)
	}
	if out, err := sshRun(t, p, two, "id -un"); err != nil || strings.TrimSpace(out) != testguest.GuestUser {
		t.Errorf("ssh with the key added to the secret: %q, %v", out, err)
	}
	if e := s.event(synced); e.Type != "MODIFIED" {
		t.Errorf("the credentials' outcome came in a %s event", e.Type)
	}

	launchertest.Must(t, h.vmiCall(t, "KillVirtualMachine", h.cmd.KillVirtualMachine, vmiJSON))
	launchertest.Must(t, h.vmiCall(t, "DeleteVirtualMachine", h.cmd.DeleteVirtualMachine, vmiJSON))
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Errorf("monitor exit status %d, want 0", code)
	}
	p.AssertNothingLeft()
}

// checkLoggedIn waits for user in GetUsers and GetGuestInfo's user list,
// with a login time.
func checkLoggedIn(t *testing.T, h *handler, user string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
		us, err := h.cmd.GetUsers(ctx, &cmdv1.EmptyRequest{})
		cancel()
		if err := failure(t, "GetUsers", us.GetResponse(), err); err != nil {
			t.Fatalf("%v", err)
		}
		users, err := kvshape.DecodeUsers([]byte(us.GuestUserListResponse))
		if err != nil {
			t.Fatalf("GetUsers: %v", err)
		}
		if i := slices.IndexFunc(users, func(u v1.VirtualMachineInstanceGuestOSUser) bool { return u.UserName == user }); i >= 0 {
			if users[i].LoginTime <= 0 {
				t.Errorf("GetUsers: %s has login time %v", user, users[i].LoginTime)
			}
			if !slices.ContainsFunc(guestInfo(t, h).UserList, func(u v1.VirtualMachineInstanceGuestOSUser) bool { return u.UserName == user }) {
				t.Errorf("GetGuestInfo's user list has no %s, though GetUsers has", user)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetUsers = %s 45 s after %s logged in", us.GuestUserListResponse, user)
		}
		time.Sleep(time.Second)
	}
}

// sshLogin logs in with a terminal (recorded in the guest's utmp, as a
// login is) and stays until the returned func is called.
func sshLogin(t *testing.T, p *pod, key ssh.Signer) (logout func()) {
	t.Helper()
	client, err := sshConnect(t, p, key)
	launchertest.Must(t, err)
	sess, err := client.NewSession()
	launchertest.Must(t, err)
	launchertest.Must(t, sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}))
	launchertest.Must(t, sess.Start("sleep 300"))
	return func() {
		sess.Close()
		client.Close()
	}
}

// sshConnect logs in to the guest's SSH server as the guest user with
// key, from the pod network's outside to the pod's address.
func sshConnect(t *testing.T, p *pod, key ssh.Signer) (*ssh.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := net.JoinHostPort(p.PodAddress(), "22")
	conn, err := p.DialOutside(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// TCG is slow; the server makes its host key at the first connection.
	launchertest.Must(t, conn.SetDeadline(time.Now().Add(time.Minute)))
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User: testguest.GuestUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		// A test guest made for this run: its host key is new every boot.
		HostKeyCallback:   ssh.InsecureIgnoreHostKey(),
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	// The login is done: the session's own timeouts apply from here.
	launchertest.Must(t, conn.SetDeadline(time.Time{}))
	return ssh.NewClient(c, chans, reqs), nil
}

// sshKey makes an ed25519 key: its signer and its authorized_keys line.
func sshKey(t *testing.T, comment string) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	launchertest.Must(t, err)
	signer, err := ssh.NewSignerFromKey(priv)
	launchertest.Must(t, err)
	return signer, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " " + comment
}

// sshRun logs in to the guest's SSH server as the guest user with key,
// from the pod network's outside to the pod's address (masquerade
// forwards the port to the guest), and runs command.
func sshRun(t *testing.T, p *pod, key ssh.Signer, command string) (string, error) {
	t.Helper()
	client, err := sshConnect(t, p, key)
	if err != nil {
		return "", err
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	out, err := sess.Output(command)
	return string(out), err
}

// TestFaultyAgent: a guest without an agent, and fakes on the agent's port
// for the faults a real agent does not produce (one that answers with bytes
// that are not JSON, one that never answers: the fake is the guest's shell,
// testguest.OptAgentGarbage/OptAgentSilent), never block the handler's
// calls: Ping, GetDomain and the agent data RPCs answer at once with
// KubeVirt's answers (success, empty data) while the poller fails; Sync
// succeeds; GuestPing and Exec fail within their timeouts, as KubeVirt's
// do; Shutdown asks and the guest powers off by ACPI.
func TestFaultyAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, opt, marker string }{
		{"none", testguest.OptNoAgent, testguest.MarkerReady},
		{"garbage", testguest.OptAgentGarbage, testguest.MarkerFakeAgent + " garbage"},
		{"silent", testguest.OptAgentSilent, testguest.MarkerFakeAgent + " silent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startPod(t, "conf-ga"+tc.name[:2], false)
			h, s := start(t, p)
			vmiJSON := handlerVMI(t, p, tc.opt)
			launchertest.Must(t, h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON))
			p.WaitConsole(tc.marker, bootTimeout)
			if d, err := h.getDomain(t); err == nil {
				if dom, err := kvshape.Decode([]byte(d)); err == nil {
					st, _ := agentChannelState(dom)
					t.Logf("agent channel %q", st)
				}
			}

			// 15 s of the handler's calls while the poller runs into
			// the fault: each answers quickly, as KubeVirt's does.
			slowest := map[string]time.Duration{}
			timed := func(name string, bound time.Duration, call func(ctx context.Context) error) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				t0 := time.Now()
				if err := call(ctx); err != nil {
					t.Errorf("%s: %v (after %v)", name, err, time.Since(t0))
				}
				slowest[name] = max(slowest[name], time.Since(t0))
			}
			empty := &cmdv1.EmptyRequest{}
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
				timed("Ping", 2*time.Second, func(ctx context.Context) error {
					r, err := h.cmd.Ping(ctx, empty)
					return failure(t, "Ping", r, err)
				})
				timed("GetDomain", 5*time.Second, func(ctx context.Context) error {
					r, err := h.cmd.GetDomain(ctx, empty)
					return failure(t, "GetDomain", r.GetResponse(), err)
				})
				timed("GetGuestInfo", 5*time.Second, func(ctx context.Context) error {
					r, err := h.cmd.GetGuestInfo(ctx, empty)
					if err := failure(t, "GetGuestInfo", r.GetResponse(), err); err != nil {
						return err
					}
					_, err = kvshape.DecodeGuestInfo([]byte(r.GuestInfoResponse))
					return err
				})
				timed("GetUsers", 5*time.Second, func(ctx context.Context) error {
					r, err := h.cmd.GetUsers(ctx, empty)
					return failure(t, "GetUsers", r.GetResponse(), err)
				})
				timed("GetFilesystems", 5*time.Second, func(ctx context.Context) error {
					r, err := h.cmd.GetFilesystems(ctx, empty)
					return failure(t, "GetFilesystems", r.GetResponse(), err)
				})
			}
			timed("Sync", 20*time.Second, func(ctx context.Context) error {
				r, err := h.cmd.SyncVirtualMachine(ctx, vmiRequest(vmiJSON))
				return failure(t, "SyncVirtualMachine", r, err)
			})
			t.Logf("slowest answers with the agent %s: %v", tc.name, slowest)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t0 := time.Now()
			if _, err := h.cmd.GuestPing(ctx, &cmdv1.GuestPingRequest{DomainName: p.DomainName(), TimeoutSeconds: 5}); err == nil {
				t.Errorf("GuestPing succeeded with agent %s", tc.name)
			} else if d := time.Since(t0); d > 15*time.Second {
				t.Errorf("GuestPing with a 5 s timeout took %v", d)
			}
			t0 = time.Now()
			if r, err := h.cmd.Exec(ctx, &cmdv1.ExecRequest{DomainName: p.DomainName(), Command: "/bin/true", TimeoutSeconds: 5}); err == nil {
				t.Errorf("Exec succeeded with agent %s: %+v", tc.name, r)
			} else if d := time.Since(t0); d > 15*time.Second {
				t.Errorf("Exec with a 5 s timeout took %v", d)
			}

			// Shutdown: the agent cannot do it; the power button does.
			// Only events after it count (the first event, at the
			// define, is Shutoff too).
			before, _ := s.snapshot()
			t0 = time.Now()
			if err := h.vmiCall(t, "ShutdownVirtualMachine", h.cmd.ShutdownVirtualMachine, vmiJSON); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if d := time.Since(t0); d > 20*time.Second {
				t.Errorf("Shutdown took %v", d)
			}
			s.wait(t, len(before), "Shutoff", time.Minute, func(d *kvshape.Domain) bool { return d.Status.Status == "Shutoff" })
			if out := p.Console(); !strings.Contains(out, testguest.MarkerPowerButton) || !strings.Contains(out, testguest.MarkerPowerOff) {
				t.Errorf("the guest was not powered off by ACPI; console:\n%s", launchertest.Tail(out, 3000))
			}
			launchertest.Must(t, h.vmiCall(t, "DeleteVirtualMachine", h.cmd.DeleteVirtualMachine, vmiJSON))
			if code := p.ExitCode(60 * time.Second); code != 0 {
				t.Errorf("monitor exit status %d, want 0", code)
			}
			p.AssertNothingLeft()
		})
	}
}
