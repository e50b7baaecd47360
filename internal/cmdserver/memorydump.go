package cmdserver

import (
	"context"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// VirtualMachineMemoryDump starts a memory dump of the domain into the file
// virt-handler names in the memory dump volume and answers success once it
// runs, as KubeVirt's launcher does: virt-handler reads the dump's end and
// outcome from the Domain's memory dump metadata, and calls again on every
// reconcile meanwhile, which answers success without a second dump. A VMI
// that does not decode, another VMI's or a dumpPath outside the hotplug
// volumes' directory is refused with a message.
func (c *cmdServer) VirtualMachineMemoryDump(ctx context.Context, req *cmdv1.MemoryDumpRequest) (*cmdv1.Response, error) {
	path := req.GetDumpPath()
	return c.vmiOp(ctx, "VirtualMachineMemoryDump", &cmdv1.VMIRequest{Vmi: req.GetVmi()}, func(ctx context.Context, v *v1.VirtualMachineInstance) error {
		return c.s.m.MemoryDump(ctx, v, path)
	})
}
