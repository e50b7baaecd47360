package cmdclient

import (
	"context"
	"fmt"

	v1 "kubevirt.io/api/core/v1"

	cmdv1 "github.com/virtlauncher/virtlauncher/api/cmd/v1"
)

// MemoryDump sends VirtualMachineMemoryDump as virt-handler does (its long
// deadline). It answers once the dump runs; the dump's end and outcome are
// in the Domain's Spec.Metadata.KubeVirt.MemoryDump.
func (c *Client) MemoryDump(ctx context.Context, vmi *v1.VirtualMachineInstance, dumpPath string) error {
	const rpc = "VirtualMachineMemoryDump"
	m, err := vmiMessage(vmi)
	if err != nil {
		return fmt.Errorf("%s: %w", rpc, err)
	}
	ctx, cancel := context.WithTimeout(ctx, LongTimeout)
	defer cancel()
	resp, err := c.cmd.VirtualMachineMemoryDump(ctx, &cmdv1.MemoryDumpRequest{Vmi: m, DumpPath: dumpPath})
	if err := callError(rpc, err); err != nil {
		return err
	}
	return responseError(rpc, resp)
}
