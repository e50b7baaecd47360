package cmdserver

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// GetDomainDirtyRateStats answers virt-handler's dirty-rate metric (one
// call per Prometheus scrape) as KubeVirt's launcher does
// (cmd-server/server.go): the rate in MB/s, or a failure naming why there
// is none. virt-handler then leaves the metric out; a gRPC error would
// only be logged louder.
func (c *cmdServer) GetDomainDirtyRateStats(ctx context.Context, _ *cmdv1.EmptyRequest) (*cmdv1.DirtyRateStatsResponse, error) {
	dr, err := c.s.m.DirtyRate(ctx)
	if err != nil {
		return &cmdv1.DirtyRateStatsResponse{Response: fail(err.Error())}, nil
	}
	if !dr.MegabytesPerSecondSet {
		return &cmdv1.DirtyRateStatsResponse{Response: fail("Dirty rate MegabytesPerSecondSet is false")}, nil
	}
	return &cmdv1.DirtyRateStatsResponse{Response: ok(), DirtyRateMbs: dr.MegabytesPerSecond}, nil
}

// WithVMStatsCollector makes GetVMStats answer (virt-launcher's
// --vm-stats-collector, which virt-controller passes with KubeVirt's
// VMStatsCollector feature gate).
func WithVMStatsCollector() Option { return func(s *Server) { s.vmStats = true } }

// agentDataFields are GetVMStats' agent commands, in KubeVirt's order
// (cmd-server/vmstats.go): whether a request asks for one and where its
// answer goes.
var agentDataFields = []struct {
	command   string
	requested func(*cmdv1.VMStatsRequest) bool
	set       func(*cmdv1.VMStatsResponse, *cmdv1.Response)
}{
	{"guest-get-load", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetLoad != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetLoad = v }},
	{"guest-get-cpustats", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetCpuStats != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetCpuStats = v }},
	{"guest-get-diskstats", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetDiskStats != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetDiskStats = v }},
	{"guest-get-time", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetTime != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetTime = v }},
	{"guest-get-vcpus", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetVcpus != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetVcpus = v }},
	{"guest-get-memory-block-info", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetMemoryBlockInfo != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetMemoryBlockInfo = v }},
	{"guest-get-users", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetUsers != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetUsers = v }},
	{"guest-get-osinfo", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetOsInfo != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetOsInfo = v }},
	{"guest-get-disks", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetDisks != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetDisks = v }},
	{"guest-get-host-name", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetHostName != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetHostName = v }},
	{"guest-get-timezone", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetTimezone != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetTimezone = v }},
	{"guest-network-get-route", func(r *cmdv1.VMStatsRequest) bool { return r.GuestNetworkGetRoute != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestNetworkGetRoute = v }},
	{"guest-network-get-interfaces", func(r *cmdv1.VMStatsRequest) bool { return r.GuestNetworkGetInterfaces != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestNetworkGetInterfaces = v }},
	{"guest-get-memory-blocks", func(r *cmdv1.VMStatsRequest) bool { return r.GuestGetMemoryBlocks != nil }, func(r *cmdv1.VMStatsResponse, v *cmdv1.Response) { r.GuestGetMemoryBlocks = v }},
}

// GetVMStats gathers what the request asks for, as KubeVirt v1.9.0's
// launcher does: the domain stats and the dirty rate as their own RPCs
// answer them, and for the agent commands the agent's version and each
// command's raw JSON reply (or a failure naming why). The whole answer is
// a success only when every part is; its message joins the parts'
// failures. Without --vm-stats-collector it is KubeVirt's gRPC error.
func (c *cmdServer) GetVMStats(ctx context.Context, req *cmdv1.VMStatsRequest) (*cmdv1.VMStatsResponse, error) {
	if !c.s.vmStats {
		return nil, status.Error(codes.Unknown, "VMStatsCollector feature gate is not enabled")
	}
	resp := &cmdv1.VMStatsResponse{Response: ok()}
	var errs []string
	if req.GetDomainStats() != nil {
		resp.DomainStats, _ = c.GetDomainStats(ctx, &cmdv1.EmptyRequest{})
		if r := resp.DomainStats.GetResponse(); !r.GetSuccess() {
			errs = append(errs, "domain stats: "+r.GetMessage())
		}
	}
	if req.GetDirtyRate() != nil {
		resp.DirtyRateStats, _ = c.GetDomainDirtyRateStats(ctx, &cmdv1.EmptyRequest{})
		if r := resp.DirtyRateStats.GetResponse(); !r.GetSuccess() {
			errs = append(errs, "dirty rate stats: "+r.GetMessage())
		}
	}
	for _, f := range agentDataFields {
		if !f.requested(req) {
			continue
		}
		if resp.GuestAgentVersion == nil {
			resp.GuestAgentVersion = &cmdv1.Response{Success: true, Message: c.s.agent.GuestInfo().GAVersion}
		}
		data, err := c.s.m.AgentData(ctx, f.command)
		r := &cmdv1.Response{Success: true, Message: data}
		if err != nil {
			r = fail(err.Error())
			errs = append(errs, fmt.Sprintf("agent data %s: %s", f.command, r.Message))
		}
		f.set(resp, r)
	}
	if len(errs) > 0 {
		resp.Response = fail(strings.Join(errs, "; "))
	}
	return resp, nil
}
