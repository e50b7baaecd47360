package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/instancetype"
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
	if needsVMI {
		cmd.Flags().StringVarP(&s.file, "file", "f", "", "the VMI manifest the launcher runs")
		cmd.Flags().StringVar(&s.binding, "binding", "masquerade", "binding of the auto-attached pod interface")
	} else {
		cmd.MarkFlagRequired("socket")
	}
}

func (s *socketFlags) dial(ctx context.Context) (*cmdclient.Client, error) {
	return cmdclient.Dial(ctx, s.socket)
}

// registerNameOrSocket adds the flags of a verb that reaches a launcher by
// a VM's NAME or by --socket alone (no manifest).
func registerNameOrSocket(cmd *cobra.Command, s *socketFlags, n *nameFlags) {
	cmd.Flags().StringVar(&s.socket, "socket", "", "the launcher's command socket (…/sockets/launcher-sock)")
	n.register(cmd)
}

// dialNameOrSocket connects to the launcher of the VM that args names, or
// to the one at --socket: exactly one of the two must be given.
func dialNameOrSocket(ctx context.Context, verb string, args []string, s *socketFlags, n *nameFlags) (*cmdclient.Client, error) {
	switch {
	case len(args) == 1 && s.socket != "":
		return nil, fmt.Errorf("%s: give NAME or --socket, not both", verb)
	case len(args) == 1:
		e, err := n.find(args[0])
		if err != nil {
			return nil, err
		}
		return dialLauncher(ctx, e)
	case s.socket == "":
		return nil, fmt.Errorf("%s: give a VM's NAME, or --socket", verb)
	}
	return s.dial(ctx)
}

// load reads the manifest as vlctl run does (its documents, the
// instancetype and preference expanded), so the launcher gets the same VMI.
func (s *socketFlags) load() (*v1.VirtualMachineInstance, error) {
	l, err := instancetype.Load([]string{s.file}, "", vmi.Options{DefaultBinding: s.binding})
	if err != nil {
		return nil, err
	}
	return l.VMI, nil
}

// vmiVerb makes a command that sends one VMIRequest RPC, to the launcher
// of a VM that `vlctl run` runs (NAME) or to the one at --socket. byName,
// when set, replaces the RPC for a VM given by name.
func vmiVerb(use, short string, call func(*cmdclient.Client, context.Context, *v1.VirtualMachineInstance) error,
	byName func(cmd *cobra.Command, n *nameFlags, name string) error) *cobra.Command {
	var s socketFlags
	var n nameFlags
	cmd := &cobra.Command{
		Use:   use + " NAME | " + use + " --socket PATH -f FILE",
		Short: short,
		Long: short + `.

NAME is a VM that vlctl run runs on this machine (vlctl ps lists them): NAMESPACE/NAME, or
NAME alone when only one namespace has a VM of that name. With --socket and -f instead, the
request goes to the launcher at that command socket, for the VMI in that manifest.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && (s.socket != "" || s.file != ""):
				return fmt.Errorf("%s: give NAME or --socket and -f, not both", use)
			case len(args) == 1 && byName != nil:
				return byName(cmd, &n, args[0])
			case len(args) == 1:
				return byNameRPC(cmd.Context(), &n, args[0], use, call)
			case s.socket == "" || s.file == "":
				return fmt.Errorf("%s: give a VM's NAME, or --socket and -f", use)
			}
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
	n.register(cmd)
	return cmd
}

func newCtlCmds() []*cobra.Command {
	sync := vmiVerb("sync", "Sync the VMI (define and start the domain when needed)",
		func(c *cmdclient.Client, ctx context.Context, v *v1.VirtualMachineInstance) error {
			return c.Sync(ctx, v, cmdclient.HandlerSyncOptions())
		}, nil)
	cmds := []*cobra.Command{
		sync,
		vmiVerb("pause", "Pause the guest", (*cmdclient.Client).Pause, nil),
		vmiVerb("unpause", "Resume a paused guest", (*cmdclient.Client).Unpause, nil),
		vmiVerb("shutdown", "Ask the guest to power off (ACPI)", (*cmdclient.Client).Shutdown, nil),
		// By name, its vlctl run destroys the guest and cleans up, as on a
		// second Ctrl-C, so the run stays the one owner of the cleanup.
		vmiVerb("kill", "Destroy the guest at once", (*cmdclient.Client).Kill, killByName),
		vmiVerb("delete", "Undefine the (stopped) domain; the launcher then exits", (*cmdclient.Client).Delete, nil),
	}

	get := newGetCmd()

	// guestinfo, by name or socket: what `virtctl guestosinfo` shows.
	var gis socketFlags
	var gin nameFlags
	var giOutput string
	guestinfo := &cobra.Command{
		Use:   "guestinfo NAME | guestinfo --socket PATH",
		Short: "Print what the guest agent reports (OS, host name, users, file systems, interfaces)",
		Long: `guestinfo prints the guest agent's report as KubeVirt gives it (virtctl guestosinfo):
KubeVirt's VirtualMachineInstanceGuestAgentInfo JSON. Its fields stay empty while the guest
runs no agent (qemu-guest-agent) or the agent has not answered yet. -o json says so
explicitly, for scripts: the field names are KubeVirt's.

NAME is a VM that vlctl run runs on this machine (vlctl ps lists them); --socket is a
launcher's command socket instead.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(giOutput, "json"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			c, err := dialNameOrSocket(ctx, "guestinfo", args, &gis, &gin)
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.GetGuestInfo(ctx)
			if err != nil {
				return fmt.Errorf("guestinfo: %w", err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, []byte(info), "", "  "); err != nil {
				return fmt.Errorf("guestinfo: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), pretty.String())
			return nil
		},
	}
	registerNameOrSocket(guestinfo, &gis, &gin)
	guestinfo.Flags().StringVarP(&giOutput, "output", "o", "json", "json, the one format: KubeVirt's VirtualMachineInstanceGuestAgentInfo (guestOSInfo, hostname, timezone, userList, fsInfo, interfaces, ...)")

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
	return append(cmds, get, guestinfo, ping)
}
