// Command virt-probe runs a VMI's exec or guest-agent-ping probe from
// inside the launcher pod, like KubeVirt's virt-probe: it asks the launcher
// (Exec or GuestPing over the command socket) and exits with the guest
// command's exit code. virtlauncher does not drive the guest agent, so with
// its launcher the probe fails with the launcher's "not supported" message
// and a non-zero exit; it never reports a success it did not observe.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
)

const defaultSocket = "/var/run/kubevirt/sockets/launcher-sock"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("virt-probe", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", defaultSocket, "Socket for connecting to the cmd server")
	domainName := fs.String("domainName", "", "Domain name of the VMI (namespace_name)")
	command := fs.String("command", "", "Command to execute on the guest; its arguments follow '--'")
	timeout := fs.Int32("timeoutSeconds", 1, "Probe timeout in seconds")
	ping := fs.Bool("guestAgentPing", false, "Ping the guest agent instead of executing a command")
	fs.String("memProfile", "", "Accepted for compatibility; ignored")
	fs.IntP("v", "v", 2, "Log verbosity; accepted for compatibility")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", "virt-probe", err)
		return 2
	}
	if !*ping && *command == "" {
		fmt.Fprintln(stderr, "virt-probe: --command or --guestAgentPing is required")
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "virt-probe: --timeoutSeconds must be positive, got %d\n", *timeout)
		return 2
	}

	ctx := context.Background()
	c, err := cmdclient.Dial(ctx, *socket)
	if err != nil {
		fmt.Fprintf(stderr, "virt-probe: connect to launcher: %v\n", err)
		return 1
	}
	defer c.Close()

	if *ping {
		if err := c.GuestPing(ctx, *domainName, *timeout); err != nil {
			fmt.Fprintf(stderr, "virt-probe: guest agent ping failed: %v\n", err)
			return 1
		}
		return 0
	}
	code, out, err := c.Exec(ctx, *domainName, *command, fs.Args(), *timeout)
	if out != "" {
		fmt.Fprintln(stdout, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-probe: executing %q in the guest failed: %v\n", *command, err)
		return 1
	}
	return int(code)
}
