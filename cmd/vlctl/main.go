// Command vlctl plays virt-handler's part on one machine: it converts and
// runs VMI manifests and drives a launcher over its command socket.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		if code := exitStatus(0); errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "vlctl:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "vlctl",
		Short:         "Run and drive virtlauncher VMs on one machine",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newConvertCmd(), newRunCmd(), newConsoleCmd("console"), newConsoleCmd("attach"), newTestGuestCmd())
	root.AddCommand(newCtlCmds()...)
	root.AddCommand(newByNameCmds()...)
	root.AddCommand(newHotplugCmds()...)
	root.AddCommand(newLogsCmd())
	root.AddCommand(newRmCmd())
	root.AddCommand(newGuestAccessCmds()...)
	addCompletions(root)
	return root
}
