package conformance

// The conformance spec: the wire contract with virt-handler
// (docs/kubevirt-wire.md §1-3, 5.7 and 6). Each test is one pod driven the
// way virt-handler drives it.
//
// Not here, because it exists elsewhere:
//   - STANDALONE_VMI boots the test guest with no client at all:
//     test/integration TestStandaloneVMI.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	k8sv1 "k8s.io/api/core/v1"
	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/api/cmdinfo"
	"github.com/virtlauncher/virtlauncher/internal/domainjson/kvshape"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// start is section 6 "Start" step 1: wait for launcher-sock (a socket, not
// a symlink), check that its peer is a long-lived launcher process, dial
// it, call Info (version 1 offered), then inject the notify pipe.
func start(t *testing.T, p *pod) (*handler, *notifyServer) {
	t.Helper()
	p.WaitReady(60 * time.Second)
	st, err := os.Lstat(p.Layout.ReadySocket())
	launchertest.Must(t, err)
	if st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("launcher-sock is %v, not a socket", st.Mode())
	}
	if _, err := os.Stat(p.Layout.InitSocket()); err == nil {
		t.Errorf("launcher-init-sock still exists next to launcher-sock (it must be renamed)")
	}
	pid := peerPID(t, p.Layout.ReadySocket())
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	launchertest.Must(t, err)
	if got := strings.TrimSpace(string(comm)); got != "virt-launcher" {
		t.Errorf("SO_PEERCRED of launcher-sock is pid %d (%s), want the virt-launcher process", pid, got)
	}

	h := dialLauncher(t, p.Layout.ReadySocket())
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	info, err := h.info.Info(ctx, &cmdinfo.CmdInfoRequest{})
	if err != nil {
		t.Fatalf("CmdInfo.Info: %v", err)
	}
	if !slices.Contains(info.SupportedCmdVersions, 1) {
		t.Fatalf("CmdInfo.Info offers %v, no version 1", info.SupportedCmdVersions)
	}
	// Before any Sync there is no domain: an empty `domain`, not an error.
	if err := h.ping(t); err != nil {
		t.Errorf("Ping before Sync: %v", err)
	}
	if d, err := h.getDomain(t); err != nil || d != "" {
		t.Errorf("GetDomain before Sync = %.200q, %v; want no domain (empty string) and no error", d, err)
	}
	return h, startNotify(t, p)
}

// syncWithConcurrentQueries is section 6 "Start" step 3, with the rule of
// 1.5: Ping and GetDomain answer within their 5 s deadline while the Sync
// runs (the handler's informer and liveness checks do not wait for it).
func syncWithConcurrentQueries(t *testing.T, h *handler, vmiJSON []byte) {
	t.Helper()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON) }()
	var (
		mu       sync.Mutex
		syncDone bool
		queries  int // all Ping/GetDomain calls
		overlap  int // those answered while the Sync still ran
		slowest  time.Duration
		queryErr []error
	)
	query := func(name string, f func() error) {
		q0 := time.Now()
		err := f()
		d := time.Since(q0)
		mu.Lock()
		defer mu.Unlock()
		queries++
		if !syncDone {
			overlap++
		}
		slowest = max(slowest, d)
		if err != nil {
			queryErr = append(queryErr, fmt.Errorf("%s during Sync after %v: %w", name, d, err))
		}
	}
	var syncErr error
	var wg sync.WaitGroup
loop:
	for {
		wg.Add(2)
		go func() { defer wg.Done(); query("Ping", func() error { return h.ping(t) }) }()
		go func() {
			defer wg.Done()
			query("GetDomain", func() error {
				d, err := h.getDomain(t)
				if err == nil && d != "" {
					// Mid-Sync the domain may not exist yet; once it
					// does, it must already have KubeVirt's shape.
					_, err = kvshape.Decode([]byte(d))
				}
				return err
			})
		}()
		select {
		case syncErr = <-done:
			mu.Lock()
			syncDone = true
			mu.Unlock()
			break loop
		case <-time.After(250 * time.Millisecond):
		}
	}
	wg.Wait()
	syncTime := time.Since(t0)
	if syncErr != nil {
		t.Fatalf("%v", syncErr)
	}
	for _, err := range queryErr {
		t.Errorf("%v", err)
	}
	// The deadline (5 s) is the contract; a Sync may legitimately take up
	// to 20 s, so queries that only finish once it returns are queued
	// behind it, which is what 1.5 forbids.
	if overlap == 0 {
		t.Errorf("none of %d Ping/GetDomain calls was answered while the Sync (%v) ran: they wait for it", queries, syncTime)
	}
	t.Logf("Sync took %v; %d of %d Ping/GetDomain calls answered while it ran, slowest %v", syncTime, overlap, queries, slowest)
}

// checkRunningDomain is what the handler reads from GetDomain's `domain`
// (kubevirt-wire.md 3.2), decoded strictly into KubeVirt's shape.
func checkRunningDomain(t *testing.T, p *pod, data string) {
	t.Helper()
	d, err := kvshape.Decode([]byte(data))
	if err != nil {
		t.Fatalf("GetDomain: %v\n%s", err, data)
	}
	if d.Kind != "Domain" || d.APIVersion != "1.2.2" {
		t.Errorf("kind/apiVersion = %q/%q, want Domain/1.2.2", d.Kind, d.APIVersion)
	}
	if d.ObjectMeta.Name != p.Name || d.ObjectMeta.Namespace != p.NS {
		t.Errorf("ObjectMeta %s/%s, want %s/%s (the handler's informer key)", d.ObjectMeta.Namespace, d.ObjectMeta.Name, p.NS, p.Name)
	}
	if d.ObjectMeta.DeletionTimestamp != nil {
		t.Errorf("running domain has deletionTimestamp %v", d.ObjectMeta.DeletionTimestamp)
	}
	if d.Spec.Name != p.NS+"_"+p.Name {
		t.Errorf("Spec.Name %q, want %s_%s", d.Spec.Name, p.NS, p.Name)
	}
	k := d.Spec.Metadata.KubeVirt
	if k.UID != p.UID {
		t.Errorf("Spec.Metadata.KubeVirt.UID %q, want the VMI uid %s", k.UID, p.UID)
	}
	if k.GracePeriod == nil || k.GracePeriod.DeletionGracePeriodSeconds != 30 {
		t.Errorf("GracePeriod %+v, want DeletionGracePeriodSeconds 30 (spec.terminationGracePeriodSeconds)", k.GracePeriod)
	}
	if d.Status.Status != "Running" || d.Status.Reason != "Unknown" {
		t.Errorf("Status %s/%s, want Running/Unknown", d.Status.Status, d.Status.Reason)
	}
	if d.Spec.Features == nil || d.Spec.Features.ACPI == nil {
		t.Errorf("Spec.Features.ACPI missing: the VMI has ACPI, the handler reads it for the Succeeded/Failed decision")
	}
	for i, ifc := range d.Spec.Devices.Interfaces {
		if ifc.Alias == nil || ifc.Alias.Name == "" {
			t.Errorf("interface %d has no Alias", i)
		}
		if ifc.MAC == nil || ifc.MAC.MAC == "" {
			t.Errorf("interface %d has no MAC", i)
		}
	}
	if p.Options().Network {
		// The alias is how the handler matches the interface to the VMI's.
		ifs := d.Spec.Devices.Interfaces
		if len(ifs) != 1 || ifs[0].Alias == nil || ifs[0].Alias.Name != "default" {
			t.Errorf("interfaces %+v, want one with Alias default", ifs)
		}
	}
	aliases := map[string]bool{}
	for i, dk := range d.Spec.Devices.Disks {
		if dk.Source.File == "" && dk.Source.Dev == "" {
			continue
		}
		if dk.Alias == nil || dk.Alias.Name == "" {
			t.Errorf("disk %d (%s%s) has a source but no Alias", i, dk.Source.File, dk.Source.Dev)
			continue
		}
		aliases[dk.Alias.Name] = true
		if dk.Target.Device == "" {
			t.Errorf("disk %s has no Target.Device (volumeStatus.target)", dk.Alias.Name)
		}
	}
	// The alias is how the handler maps a disk back to its volume.
	for _, vol := range []string{"root", "scratch", "cloudinit"} {
		if !aliases[vol] {
			t.Errorf("no attached disk with Alias %q; aliases: %v", vol, aliases)
		}
	}
}

// checkEvents: only ADDED and MODIFIED are ever sent (never ERROR, and
// deletion as MODIFIED rather than DELETED), ADDED only once (the define);
// every domainJSON decodes and names the VMI (2.3); its timestamps are
// RFC 3339 with second precision (3.1).
func checkEvents(t *testing.T, p *pod, s *notifyServer) {
	t.Helper()
	evs, _ := s.snapshot()
	added := 0
	for i, e := range evs {
		switch e.Type {
		case "ADDED":
			added++
		case "MODIFIED":
		default:
			t.Errorf("event %d has type %q", i, e.Type)
		}
		if e.Err != nil {
			t.Errorf("event %d (%s) does not decode as KubeVirt's Domain: %v\n%s", i, e.Type, e.Err, e.JSON)
			continue
		}
		d := e.Domain
		if d.ObjectMeta.Name != p.Name || d.ObjectMeta.Namespace != p.NS || d.Spec.Metadata.KubeVirt.UID != p.UID {
			t.Errorf("event %d (%s) names %s/%s uid %q, want %s/%s uid %s", i, e, d.ObjectMeta.Namespace, d.ObjectMeta.Name,
				d.Spec.Metadata.KubeVirt.UID, p.NS, p.Name, p.UID)
		}
		for _, bad := range badTimestamps(e.JSON) {
			t.Errorf("event %d (%s): %s", i, e, bad)
		}
		// The test guest runs no agent here (vl.noagent=1): no event may
		// claim its channel connected (virt-handler would then call
		// GetGuestInfo).
		if st, _ := agentChannelState(d); st == "connected" {
			t.Errorf("event %d (%s) reports the %s channel connected; the guest runs no agent", i, e, guestAgentChannel)
		}
	}
	if added != 1 {
		t.Errorf("%d ADDED events, want 1 (the define)", added)
	}
	if len(s.k8sEvents()) > 0 {
		t.Errorf("unexpected K8s events: %q", s.k8sEvents())
	}
	t.Logf("events: %v; NotifyInfo.Info calls: %d", evs, s.infoCalls())
}

var metaTimeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// badTimestamps lists every non-null value under a key ending in
// "Timestamp" that is not a metav1.Time string ("2025-01-02T03:04:05Z").
func badTimestamps(data []byte) []string {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return []string{err.Error()}
	}
	var bad []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch vv := v.(type) {
		case map[string]any:
			for k, c := range vv {
				if strings.HasSuffix(k, "Timestamp") && c != nil {
					if str, ok := c.(string); !ok || !metaTimeRE.MatchString(str) {
						bad = append(bad, fmt.Sprintf("%s.%s = %v, want RFC 3339 seconds in UTC", path, k, c))
					}
				}
				walk(path+"."+k, c)
			}
		case []any:
			for i, c := range vv {
				walk(fmt.Sprintf("%s[%d]", path, i), c)
			}
		}
	}
	walk("", v)
	return bad
}

// checkUnsupported: a P2 RPC (migration) is refused visibly, never a fake
// success and never success=false without a message; a Sync whose VMI does
// not parse is success=false with a message (1.5).
func checkUnsupported(t *testing.T, h *handler, vmiJSON []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), longDeadline)
	defer cancel()
	r, err := h.cmd.MigrateVirtualMachine(ctx, &cmdv1.MigrationRequest{Vmi: &cmdv1.VMI{VmiJson: vmiJSON}, Options: []byte(`{}`)})
	switch {
	case err != nil && status.Code(err) == codes.Unimplemented:
		t.Logf("MigrateVirtualMachine: gRPC Unimplemented (%v)", err)
	case err != nil:
		t.Errorf("MigrateVirtualMachine: %v, want success=false with a message or Unimplemented", err)
	case r.Success:
		t.Errorf("MigrateVirtualMachine answered success: migration is not supported")
	case r.Message == "":
		t.Errorf("MigrateVirtualMachine: success=false with an empty message (the handler reads that as success)")
	default:
		t.Logf("MigrateVirtualMachine: success=false %q", r.Message)
	}
	err = h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, []byte(`{"metadata":`))
	if err == nil {
		t.Errorf("Sync of an unparsable VMI succeeded")
	} else {
		t.Logf("Sync of an unparsable VMI: %v", err)
	}
}

// checkUnappliedRefused: the changes virt-handler asks of a running
// domain that the launcher cannot carry out (an interface hotplug whose
// pod side is not wired, or with a binding KubeVirt cannot plug; an unplug
// of the pod network; a hotplug volume whose image QEMU's user cannot open)
// fail the Sync with a message naming the device, never a success; the
// unchanged VMI syncs again. TestHotplug has the ones it makes.
func checkUnappliedRefused(t *testing.T, h *handler, vmiJSON []byte) {
	t.Helper()
	before := domainInterfaces(t, h)
	for _, tc := range []struct {
		name, want string
		change     func(v *v1.VirtualMachineInstance)
	}{
		{"interface hotplug before the privileged phase wired it", `interface "extra": `, func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces,
				v1.Interface{Name: "extra", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
			v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: "extra", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "extra-net"}}})
			v.Status.Interfaces = append(v.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: "extra", InfoSource: "multus-status"})
		}},
		{"interface hotplug with the masquerade binding", `interfaces[1].masquerade: masquerade is only possible on the pod network`, func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces,
				v1.Interface{Name: "extra", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}})
			v.Spec.Networks = append(v.Spec.Networks, v1.Network{Name: "extra", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "extra-net"}}})
			v.Status.Interfaces = append(v.Status.Interfaces, v1.VirtualMachineInstanceNetworkInterface{Name: "extra", InfoSource: "multus-status"})
		}},
		{"unplug of the pod network's interface", `interface "default": unplug is possible only for an interface on a secondary network`, func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces[0].State = v1.InterfaceStateAbsent
		}},
		{"hotplug volume mounted to the pod, its image not usable", `disk "hp": volume not usable yet`, func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Disks = append(v.Spec.Domain.Devices.Disks,
				v1.Disk{Name: "hp", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}})
			v.Spec.Volumes = append(v.Spec.Volumes, v1.Volume{Name: "hp", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true,
					PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "hp-claim"}}}})
			v.Status.VolumeStatus = append(v.Status.VolumeStatus, v1.VolumeStatus{Name: "hp", Target: "sda",
				Phase: v1.HotplugVolumeMounted, HotplugVolume: &v1.HotplugVolumeStatus{AttachPodName: "hp-pod"}})
		}},
	} {
		var v v1.VirtualMachineInstance
		launchertest.Must(t, json.Unmarshal(vmiJSON, &v))
		tc.change(&v)
		b, err := json.Marshal(&v)
		launchertest.Must(t, err)
		err = h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, b)
		switch {
		case err == nil:
			t.Errorf("%s: Sync answered success for a change it did not make", tc.name)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: Sync failed with %v, want it to name %q", tc.name, err, tc.want)
		default:
			t.Logf("%s: %v", tc.name, err)
		}
		if got := domainInterfaces(t, h); got != before {
			t.Errorf("%s: the Domain's interfaces are %s after the refusal, were %s", tc.name, got, before)
		}
	}
	if err := h.vmiCall(t, "SyncVirtualMachine (unchanged)", h.cmd.SyncVirtualMachine, vmiJSON); err != nil {
		t.Errorf("%v", err)
	}
}

// checkLinkState: interfaces[].state down and up again (KubeVirt's
// LiveUpdate of a running VM) reach the running domain: the Sync succeeds,
// the Domain reports the link state, and the guest sees its carrier go and
// come back.
func checkLinkState(t *testing.T, h *handler, p *pod, vmiJSON []byte) {
	t.Helper()
	for i, state := range []v1.InterfaceState{v1.InterfaceStateLinkDown, v1.InterfaceStateLinkUp} {
		var v v1.VirtualMachineInstance
		launchertest.Must(t, json.Unmarshal(vmiJSON, &v))
		v.Spec.Domain.Devices.Interfaces[0].State = state
		b, err := json.Marshal(&v)
		launchertest.Must(t, err)
		if err := h.vmiCall(t, "SyncVirtualMachine (link "+string(state)+")", h.cmd.SyncVirtualMachine, b); err != nil {
			t.Errorf("%v", err)
			continue
		}
		data, err := h.getDomain(t)
		launchertest.Must(t, err)
		d, err := kvshape.Decode([]byte(data))
		launchertest.Must(t, err)
		if ifs := d.Spec.Devices.Interfaces; len(ifs) != 1 || (state == v1.InterfaceStateLinkDown) != (ifs[0].LinkState != nil && ifs[0].LinkState.State == "down") {
			t.Errorf("link %s: the Domain's interfaces %+v", state, ifs)
		}
		// The guest's carrier: 0 while the link is down.
		carrier := "1"
		if state == v1.InterfaceStateLinkDown {
			carrier = "0"
		}
		marker := fmt.Sprintf("VL-T-CARRIER%d-%sX", i, carrier)
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(p.Console(), marker) {
			if time.Now().After(deadline) {
				t.Errorf("link %s: the guest's eth0 carrier is not %s; console:\n%s", state, carrier, launchertest.Tail(p.Console(), 1500))
				break
			}
			typeOnConsole(t, p, fmt.Sprintf("ip link set eth0 up; echo VL-T-CARRIER%d-$(cat /sys/class/net/eth0/carrier)X\n", i))
			time.Sleep(time.Second)
		}
	}
}

// shutdownAndDelete is section 6 "Graceful stop" steps 2-6 from the
// handler's side, after the events up to index from.
func shutdownAndDelete(t *testing.T, p *pod, h *handler, s *notifyServer, vmiJSON []byte, from int) {
	t.Helper()
	if err := h.ping(t); err != nil {
		t.Fatalf("%v", err)
	}
	if err := h.vmiCall(t, "ShutdownVirtualMachine", h.cmd.ShutdownVirtualMachine, vmiJSON); err != nil && !disconnected(err) {
		t.Fatalf("%v", err)
	}
	off := s.wait(t, from, "MODIFIED Shutoff/Shutdown", 2*time.Minute, func(d *kvshape.Domain) bool {
		return d.Status.Status == "Shutoff" && d.Status.Reason == "Shutdown"
	})
	if e := s.event(off); e.Type != "MODIFIED" {
		t.Errorf("Shutoff event type %s, want MODIFIED", e.Type)
	}
	if gp := s.event(off).Domain.Spec.Metadata.KubeVirt.GracePeriod; gp == nil || gp.DeletionTimestamp == nil {
		t.Errorf("Shutoff event without GracePeriod.DeletionTimestamp (set by the first Shutdown, 3.5)")
	}
	select {
	case <-p.Exited:
		t.Fatalf("launcher exited before the handler's Delete")
	default:
	}

	if err := h.ping(t); err != nil {
		t.Fatalf("%v", err)
	}
	if err := h.vmiCall(t, "DeleteVirtualMachine", h.cmd.DeleteVirtualMachine, vmiJSON); err != nil && !disconnected(err) {
		t.Fatalf("%v", err)
	}
	gone := s.wait(t, off+1, "gone (deletionTimestamp, NoState/NonExistent)", 30*time.Second, func(d *kvshape.Domain) bool {
		return d.ObjectMeta.DeletionTimestamp != nil
	})
	e := s.event(gone)
	if e.Type != "MODIFIED" || e.Domain.Status.Status != "NoState" || e.Domain.Status.Reason != "NonExistent" {
		t.Errorf("gone event %s %s/%s, want MODIFIED NoState/NonExistent", e.Type, e.Domain.Status.Status, e.Domain.Status.Reason)
	}
	if e.Domain.Spec.Metadata.KubeVirt.UID != p.UID || e.Domain.ObjectMeta.Name != p.Name || e.Domain.ObjectMeta.Namespace != p.NS {
		t.Errorf("gone event lost the identity: %s/%s uid %q", e.Domain.ObjectMeta.Namespace, e.Domain.ObjectMeta.Name, e.Domain.Spec.Metadata.KubeVirt.UID)
	}
	if code := p.ExitCode(30 * time.Second); code != 0 {
		t.Fatalf("compute container (monitor) exit status %d, want 0", code)
	}
	if _, err := os.Stat(filepath.Join(p.Layout.SocketsDir(), "launcher-unresponsive")); err == nil {
		t.Errorf("the launcher created launcher-unresponsive (only the handler may)")
	}
	p.AssertNothingLeft()
}

// TestHandlerLifecycle plays virt-handler through a VMI's whole life
// (kubevirt-wire.md 6): Info, notify pipe, Sync (with Ping/GetDomain
// answering during it), ADDED then MODIFIED Running, GetDomain in
// KubeVirt's shape, an unsupported RPC refused with a message, Shutdown ->
// MODIFIED Shutoff/Shutdown, Delete -> MODIFIED gone -> exit 0; then the
// log lines of the run.
func TestHandlerLifecycle(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	p := startPod(t, "conf-life", true)
	h, s := start(t, p)
	t.Logf("launcher-sock after %v", time.Since(t0))
	// Without the guest agent: TestGuestAgent has it.
	vmiJSON := handlerVMI(t, p, testguest.OptNoAgent)

	syncWithConcurrentQueries(t, h, vmiJSON)
	added := s.wait(t, 0, "ADDED", 30*time.Second, func(*kvshape.Domain) bool { return true })
	if added != 0 || s.event(0).Type != "ADDED" {
		t.Errorf("first event is %s, want ADDED", s.event(0))
	}
	running := s.wait(t, added+1, "MODIFIED Running", bootTimeout, func(d *kvshape.Domain) bool {
		return d.Status.Status == "Running"
	})
	if e := s.event(running); e.Type != "MODIFIED" || e.Domain.Status.Reason != "Unknown" {
		t.Errorf("running event %s, want MODIFIED Running/Unknown", e)
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
	t.Logf("guest ready after %v", time.Since(t0))

	d, err := h.getDomain(t)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if d == "" {
		t.Fatalf("GetDomain: no domain while it runs")
	}
	checkRunningDomain(t, p, d)
	checkAgentDisconnected(t, h, d)
	checkDomainStats(t, h, p.DomainName())
	// Every informer list and resync is a new connection that calls Info
	// first, while the long-lived one stays open.
	h2 := dialLauncher(t, p.Layout.ReadySocket())
	ictx, icancel := context.WithTimeout(context.Background(), shortDeadline)
	if _, err := h2.info.Info(ictx, &cmdinfo.CmdInfoRequest{}); err != nil {
		t.Errorf("Info on a second connection: %v", err)
	}
	icancel()
	if d2, err := h2.getDomain(t); err != nil || d2 == "" {
		t.Errorf("GetDomain on a second connection: %.100q, %v", d2, err)
	}
	h2.conn.Close()
	// A reconcile Sync of the running VMI is idempotent.
	if err := h.vmiCall(t, "SyncVirtualMachine (reconcile)", h.cmd.SyncVirtualMachine, vmiJSON); err != nil {
		t.Errorf("%v", err)
	}
	checkUnsupported(t, h, vmiJSON)
	checkUnappliedRefused(t, h, vmiJSON)
	checkLinkState(t, h, p, vmiJSON)
	checkNICHotplug(t, h, p, vmiJSON)

	shutdownAndDelete(t, p, h, s, vmiJSON, running+1)
	checkEvents(t, p, s)
	t.Logf("whole lifecycle %v", time.Since(t0))
	checkLogs(t, p)
}

// TestSIGTERMGracefulShutdown: SIGTERM to the monitor (the pod is being
// deleted) makes the launcher send an event with
// GracePeriod.MarkedForGracefulShutdown true; the handler then does its
// graceful stop (Ping, Shutdown, Delete) and the pod ends with 0.
func TestSIGTERMGracefulShutdown(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	p := startPod(t, "conf-term", false)
	h, s := start(t, p)
	vmiJSON := handlerVMI(t, p, testguest.OptNoAgent)
	if err := h.vmiCall(t, "SyncVirtualMachine", h.cmd.SyncVirtualMachine, vmiJSON); err != nil {
		t.Fatalf("%v", err)
	}
	running := s.wait(t, 0, "MODIFIED Running", bootTimeout, func(d *kvshape.Domain) bool { return d.Status.Status == "Running" })
	if gp := s.event(running).Domain.Spec.Metadata.KubeVirt.GracePeriod; gp != nil && gp.MarkedForGracefulShutdown != nil && *gp.MarkedForGracefulShutdown {
		t.Fatalf("MarkedForGracefulShutdown already true before SIGTERM")
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)

	launchertest.Must(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	marked := s.wait(t, running+1, "MarkedForGracefulShutdown=true", 30*time.Second, func(d *kvshape.Domain) bool {
		gp := d.Spec.Metadata.KubeVirt.GracePeriod
		return gp != nil && gp.MarkedForGracefulShutdown != nil && *gp.MarkedForGracefulShutdown
	})
	if e := s.event(marked); e.Type != "MODIFIED" || e.Domain.Spec.Metadata.KubeVirt.UID != p.UID {
		t.Errorf("marked event %s uid %q", e, e.Domain.Spec.Metadata.KubeVirt.UID)
	}
	// A reconcile may still Sync before the handler has seen the mark: it
	// must not fail (a failed Sync becomes a warning on the VMI).
	if err := h.vmiCall(t, "SyncVirtualMachine after SIGTERM", h.cmd.SyncVirtualMachine, vmiJSON); err != nil {
		t.Errorf("Sync after SIGTERM: %v", err)
	}
	shutdownAndDelete(t, p, h, s, vmiJSON, marked)
	checkEvents(t, p, s)
	t.Logf("SIGTERM lifecycle %v", time.Since(t0))
	checkLogs(t, p)
}
