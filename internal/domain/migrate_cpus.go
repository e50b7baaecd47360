package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/premigration"
)

// targetCPUs gives the destination XML of a VMI with dedicated CPUs the
// target pod's CPU placement, when no pre-migration hook does it on the
// target (KubeVirt's source without the LibvirtHooksServerAndClient gate:
// v1.8.2's default): the VMI converted with the target's CPU set and host
// topology, which the target's handler put into
// status.migrationState.targetCPUSet and targetNodeTopology, gives the
// fields the hook would (premigration.DedicatedCPUs).
func (x *migrations) targetCPUs(ctx context.Context, v *v1.VirtualMachineInstance, dom *libvirtxml.Domain) error {
	ms := v.Status.MigrationState
	if ms == nil || len(ms.TargetCPUSet) == 0 {
		return errors.New("dedicated CPUs: status.migrationState.targetCPUSet is empty: the target's CPUs are not known")
	}
	cells, err := parseNodeTopology(ms.TargetNodeTopology)
	if err != nil {
		return fmt.Errorf("dedicated CPUs: status.migrationState.targetNodeTopology: %w", err)
	}
	c, err := x.facts(ctx, v, SyncOptions{HostNUMA: cells})
	if err != nil {
		return fmt.Errorf("dedicated CPUs: %w", err)
	}
	c.CPUSet = c.CPUSet[:0:0]
	for _, cpu := range ms.TargetCPUSet {
		if cpu < 0 {
			return fmt.Errorf("dedicated CPUs: status.migrationState.targetCPUSet names CPU %d", cpu)
		}
		c.CPUSet = append(c.CPUSet, uint(cpu))
	}
	target, err := converter.Convert(v, c)
	if err != nil {
		return fmt.Errorf("dedicated CPUs on the target's CPU set %v: %w", ms.TargetCPUSet, err)
	}
	return premigration.DedicatedCPUs(v, target)(dom)
}

// parseNodeTopology reads virt-handler's JSON of the node's
// cmdv1.Topology (the protobuf struct's JSON names).
func parseNodeTopology(s string) ([]facts.NUMACell, error) {
	var topo struct {
		NUMACells []struct {
			ID   uint `json:"id"`
			CPUs []struct {
				ID       uint   `json:"id"`
				Siblings []uint `json:"siblings"`
			} `json:"cpus"`
		} `json:"numa_cells"`
	}
	if err := json.Unmarshal([]byte(s), &topo); err != nil {
		return nil, err
	}
	var cells []facts.NUMACell
	for _, c := range topo.NUMACells {
		cell := facts.NUMACell{ID: c.ID}
		for _, cpu := range c.CPUs {
			cell.CPUs = append(cell.CPUs, facts.HostCPU{ID: cpu.ID, Siblings: cpu.Siblings})
		}
		cells = append(cells, cell)
	}
	return cells, nil
}
