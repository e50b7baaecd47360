package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// The verbs below drive a running launcher over its command socket, as
// virt-handler does.

type socketFlags struct {
	socket  string
	file    string
	binding string
}

func (s *socketFlags) register(cmd *cobra.Command, needsVMI bool) {
	cmd.Flags().StringVar(&s.socket, "socket", "", "the launcher's command socket (…/sockets/launcher-sock)")
	cmd.MarkFlagRequired("socket")
	if needsVMI {
		cmd.Flags().StringVarP(&s.file, "file", "f", "", "the VMI manifest the launcher runs")
		cmd.MarkFlagRequired("file")
		cmd.Flags().StringVar(&s.binding, "binding", "masquerade", "binding of the auto-attached pod interface")
	}
}

func (s *socketFlags) dial(ctx context.Context) (*cmdclient.Client, error) {
	return cmdclient.Dial(ctx, s.socket)
}

func (s *socketFlags) load() (*v1.VirtualMachineInstance, error) {
	return vmi.LoadFile(s.file, vmi.Options{DefaultBinding: s.binding})
}

// vmiVerb makes a command that sends one VMIRequest RPC.
func vmiVerb(use, short string, call func(*cmdclient.Client, context.Context, *v1.VirtualMachineInstance) error) *cobra.Command {
	var s socketFlags
	cmd := &cobra.Command{
		Use:   use + " --socket PATH -f FILE",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := s.load()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			c, err := s.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := call(c, ctx, v); err != nil {
				return fmt.Errorf("%s: %w", use, err)
			}
			return nil
		},
	}
	s.register(cmd, true)
	return cmd
}

func newCtlCmds() []*cobra.Command {
	sync := vmiVerb("sync", "Sync the VMI (define and start the domain when needed)",
		func(c *cmdclient.Client, ctx context.Context, v *v1.VirtualMachineInstance) error {
			return c.Sync(ctx, v, cmdclient.HandlerSyncOptions())
		})
	cmds := []*cobra.Command{
		sync,
		vmiVerb("pause", "Pause the guest", (*cmdclient.Client).Pause),
		vmiVerb("unpause", "Resume a paused guest", (*cmdclient.Client).Unpause),
		vmiVerb("shutdown", "Ask the guest to power off (ACPI)", (*cmdclient.Client).Shutdown),
		vmiVerb("kill", "Destroy the guest at once", (*cmdclient.Client).Kill),
		vmiVerb("delete", "Undefine the (stopped) domain; the launcher then exits", (*cmdclient.Client).Delete),
	}

	var gs socketFlags
	get := &cobra.Command{
		Use:   "get --socket PATH",
		Short: "Print the launcher's Domain object (KubeVirt's JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			c, err := gs.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			d, exists, err := c.GetDomain(ctx)
			if err != nil {
				return fmt.Errorf("get: %w", err)
			}
			if !exists {
				return fmt.Errorf("get: no domain is defined")
			}
			b, err := json.MarshalIndent(d, "", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	gs.register(get, false)

	var ps socketFlags
	ping := &cobra.Command{
		Use:   "ping --socket PATH",
		Short: "Check that the launcher answers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			c, err := ps.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.Ping(ctx); err != nil {
				return fmt.Errorf("ping: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	ps.register(ping, false)
	return append(cmds, get, ping)
}
