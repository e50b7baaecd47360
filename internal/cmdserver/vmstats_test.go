package cmdserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver"
	"github.com/virtlauncher/virtlauncher/internal/cmdserver/cmdservertest"
	"github.com/virtlauncher/virtlauncher/internal/domain"
)

// TestDirtyRateReply: GetDomainDirtyRateStats answers KubeVirt's way: the
// figure with success; a failure Response (never a gRPC error) naming why
// when the manager has none or QEMU gave no figure.
func TestDirtyRateReply(t *testing.T) {
	m := &cmdservertest.Fake{}
	c, _ := start(t, m)
	cmd := cmdv1.NewCmdClient(c.Conn())
	ask := func() *cmdv1.DirtyRateStatsResponse {
		t.Helper()
		r, err := cmd.GetDomainDirtyRateStats(context.Background(), &cmdv1.EmptyRequest{})
		if err != nil {
			t.Fatalf("GetDomainDirtyRateStats: gRPC error %v, want a Response", err)
		}
		return r
	}
	m.DirtyRateStats = domain.StatsDirtyRate{CalcStatusSet: true, CalcStatus: 2, MegabytesPerSecondSet: true, MegabytesPerSecond: 42}
	if r := ask(); !r.GetResponse().GetSuccess() || r.DirtyRateMbs != 42 {
		t.Errorf("measured 42 MB/s: %+v", r)
	}
	m.DirtyRateStats = domain.StatsDirtyRate{CalcStatusSet: true, CalcStatus: 2}
	if r := ask(); r.GetResponse().GetSuccess() || r.GetResponse().GetMessage() != "Dirty rate MegabytesPerSecondSet is false" || r.DirtyRateMbs != 0 {
		t.Errorf("no figure: %+v, want KubeVirt's failure", r)
	}
	m.Err = errors.New("dirty rate calculation status is DomainDirtyrateMeasuring")
	if r := ask(); r.GetResponse().GetSuccess() || r.GetResponse().GetMessage() != m.Err.Error() {
		t.Errorf("manager error: %+v, want a failure naming it", r)
	}
}

// TestGetVMStats: without --vm-stats-collector GetVMStats is KubeVirt's
// gRPC error; with it, each requested part answers as its own RPC would,
// each agent command with the agent's raw JSON or a failure naming it,
// parts not asked for stay out, and the whole is a failure joining the
// parts' failures.
func TestGetVMStats(t *testing.T) {
	m := &cmdservertest.Fake{Stats: []byte(`{"Name":"ns1_vm1"}`), FakeAgent: cmdservertest.FakeAgent{AgentAnswers: map[string]string{"guest-get-time": `{"return":1765000000000000000}`}}}
	off, _ := start(t, m)
	_, err := cmdv1.NewCmdClient(off.Conn()).GetVMStats(context.Background(), &cmdv1.VMStatsRequest{})
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "VMStatsCollector feature gate is not enabled" {
		t.Errorf("GetVMStats without the collector: %v, want KubeVirt's Unknown error", err)
	}

	on, _ := startWith(t, m, cmdserver.WithoutSyncValidation(), cmdserver.WithVMStatsCollector())
	cmd := cmdv1.NewCmdClient(on.Conn())
	m.DirtyRateStats = domain.StatsDirtyRate{CalcStatusSet: true, CalcStatus: 2, MegabytesPerSecondSet: true, MegabytesPerSecond: 7}
	r, err := cmd.GetVMStats(context.Background(), &cmdv1.VMStatsRequest{
		DomainStats: &cmdv1.DomainStatsRequest{}, DirtyRate: &cmdv1.DirtyRateRequest{},
		GuestGetTime: &cmdv1.AgentTimeRequest{}, GuestGetLoad: &cmdv1.AgentLoadRequest{},
	})
	if err != nil {
		t.Fatalf("GetVMStats: %v", err)
	}
	if r.GetDomainStats().GetDomainStats() != `{"Name":"ns1_vm1"}` || r.GetDirtyRateStats().GetDirtyRateMbs() != 7 {
		t.Errorf("domain stats %+v, dirty rate %+v", r.GetDomainStats(), r.GetDirtyRateStats())
	}
	if g := r.GetGuestGetTime(); !g.GetSuccess() || g.GetMessage() != `{"return":1765000000000000000}` {
		t.Errorf("guest-get-time %+v, want the agent's reply", g)
	}
	if g := r.GetGuestGetLoad(); g.GetSuccess() || !strings.Contains(g.GetMessage(), "guest-get-load has not been found") {
		t.Errorf("guest-get-load %+v, want a failure naming the agent's", g)
	}
	if r.GetGuestAgentVersion() == nil || !r.GetGuestAgentVersion().GetSuccess() || r.GetGuestGetUsers() != nil {
		t.Errorf("agent version %+v, users %+v: want a version answer and nothing unasked", r.GetGuestAgentVersion(), r.GetGuestGetUsers())
	}
	if msg := r.GetResponse().GetMessage(); r.GetResponse().GetSuccess() || !strings.HasPrefix(msg, "agent data guest-get-load: ") {
		t.Errorf("response %+v, want a failure naming guest-get-load", r.GetResponse())
	}
	// Asked for nothing: success, no parts.
	if r, err := cmd.GetVMStats(context.Background(), &cmdv1.VMStatsRequest{}); err != nil || !r.GetResponse().GetSuccess() ||
		r.GetDomainStats() != nil || r.GetGuestAgentVersion() != nil {
		t.Errorf("empty request: %+v, %v", r, err)
	}
}
