package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// kvDomainStats is KubeVirt's stats.DomainStats (v1.9,
// pkg/virt-launcher/virtwrap/stats/types.go), which virt-handler decodes
// the GetDomainStats JSON into: only the parts its collectors read are
// typed, the rest kept raw so that every key is still checked by name.
type kvDomainStats struct {
	Name, UUID string
	Cpu        *struct {
		TimeSet, UserSet, SystemSet bool
		Time, User, System          uint64
	} //nolint:revive // KubeVirt's key.
	Memory               json.RawMessage
	MigrateDomainJobInfo json.RawMessage
	Vcpu                 []struct {
		StateSet, TimeSet, WaitSet, DelaySet bool
		State                                int
		Time, Wait, Delay                    uint64
	}
	Net []struct {
		NameSet, AliasSet                                                            bool
		Name, Alias                                                                  string
		RxBytesSet                                                                   bool
		RxBytes                                                                      uint64
		RxPktsSet, RxErrsSet, RxDropSet, TxBytesSet, TxPktsSet, TxErrsSet, TxDropSet bool
		RxPkts, RxErrs, RxDrop, TxBytes, TxPkts, TxErrs, TxDrop                      uint64
	}
	Block     []json.RawMessage
	CPUMapSet bool
	CPUMap    [][]bool
	DirtyRate *json.RawMessage
	Load      *kvLoad
}

// kvLoad is KubeVirt's DomainStatsLoad, the guest agent's load average.
type kvLoad struct {
	Load1mSet, Load5mSet, Load15mSet bool
	Load1m, Load5m, Load15m          float64
}

// checkDomainStats: GetDomainStats of the running VMI decodes strictly into
// KubeVirt's DomainStats, and names the pod interface by the VMI's
// interface name (KubeVirt's metrics label it "default", not "tap0").
func checkDomainStats(t *testing.T, h *handler, domName string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), shortDeadline)
	defer cancel()
	r, err := h.cmd.GetDomainStats(ctx, &cmdv1.EmptyRequest{})
	if err != nil || !r.GetResponse().GetSuccess() {
		t.Fatalf("GetDomainStats: %+v, %v", r.GetResponse(), err)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(r.DomainStats)))
	dec.DisallowUnknownFields()
	var s kvDomainStats
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("GetDomainStats JSON is not KubeVirt's DomainStats: %v\n%.400s", err, r.DomainStats)
	}
	// KubeVirt's launcher always sends a DirtyRate and a Load.
	if s.Name != domName || s.Cpu == nil || !s.Cpu.TimeSet || !s.CPUMapSet || len(s.CPUMap) == 0 || s.DirtyRate == nil || s.Load == nil {
		t.Errorf("stats name %q cpu %+v CPUMapSet %v rows %d dirty rate %v load %v", s.Name, s.Cpu, s.CPUMapSet, len(s.CPUMap), s.DirtyRate != nil, s.Load != nil)
	}
	if len(s.Net) != 1 || !s.Net[0].AliasSet || s.Net[0].Alias != "default" || !s.Net[0].RxBytesSet {
		t.Errorf("Net %+v, want one interface aliased %q", s.Net, "default")
	}
}
