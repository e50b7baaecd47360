package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/virtlauncher/virtlauncher/internal/runctl"
	"github.com/virtlauncher/virtlauncher/internal/standalone"
)

// newMemoryDumpCmd is vlctl's virtctl memory-dump get: it asks the vlctl
// run of the VM named to dump the guest's memory into a new file
// (internal/standalone, memorydump.go).
func newMemoryDumpCmd() *cobra.Command {
	var n nameFlags
	cmd := &cobra.Command{
		Use:   "memory-dump NAME FILE",
		Short: "Dump a running VM's memory into a new file, as virtctl memory-dump get does",
		Long: `memory-dump writes the memory of the VM that vlctl run runs into FILE, a new file (root's,
0600), as KubeVirt dumps it into a memory dump volume: libvirt's memory-only core dump, an
ELF core that crash or gdb reads. The guest is paused while its memory is written and runs
on after. QEMU's user is given write access to FILE for the dump (an ACL entry, taken back
after it), so the directory must be one it can enter. FILE is removed when the dump fails.
NAME is NAMESPACE/NAME, or NAME alone when only one namespace has a VM of that name.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), standalone.DumpRequestLimit)
			defer cancel()
			cmd.SetContext(ctx)
			return controlByName(cmd, &n, args[0], runctl.MemoryDump{File: args[1]})
		},
	}
	n.register(cmd)
	return cmd
}
