// Command virt-freezer freezes or thaws a VMI's guest file systems, run
// from backup hooks inside the launcher pod like KubeVirt's virt-freezer.
// It calls FreezeVirtualMachine / UnfreezeVirtualMachine on the command
// socket; the launcher freezes through the guest agent, so without a
// connected agent virt-freezer exits non-zero with the launcher's reason.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

const defaultSocket = "/run/kubevirt/sockets/launcher-sock"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("virt-freezer", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	freeze := fs.Bool("freeze", false, "Freeze the guest file systems")
	unfreeze := fs.Bool("unfreeze", false, "Thaw the guest file systems")
	name := fs.String("name", "", "Name of the VirtualMachineInstance")
	namespace := fs.String("namespace", "", "Namespace of the VirtualMachineInstance")
	unfreezeTimeout := fs.Int32("unfreezeTimeoutSeconds", 300, "Thaw automatically after this many seconds")
	socket := fs.String("socket", defaultSocket, "Socket for connecting to the cmd server")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", "virt-freezer", err)
		return 2
	}
	if *freeze == *unfreeze {
		fmt.Fprintln(stderr, "virt-freezer: use exactly one of --freeze or --unfreeze")
		return 1
	}
	if *name == "" || *namespace == "" {
		fmt.Fprintln(stderr, "virt-freezer: both --name and --namespace are required")
		return 1
	}
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: *name, Namespace: *namespace}}

	ctx := context.Background()
	c, err := cmdclient.Dial(ctx, *socket)
	if err != nil {
		fmt.Fprintf(stderr, "virt-freezer: connect to launcher: %v\n", err)
		return 1
	}
	defer c.Close()

	// As KubeVirt's: a paused guest cannot be frozen or thawed; that is
	// not an error for the backup.
	d, exists, err := c.GetDomain(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "virt-freezer: get domain: %v\n", err)
		return 1
	}
	if exists && d.Status.Status == domainjson.StatusPaused {
		fmt.Fprintln(stderr, "virt-freezer: VMI is paused; freeze/unfreeze not possible, nothing done")
		return 0
	}
	if *freeze {
		err = c.Freeze(ctx, vmi, *unfreezeTimeout)
	} else {
		err = c.Unfreeze(ctx, vmi)
	}
	if err != nil {
		fmt.Fprintf(stderr, "virt-freezer: %v\n", err)
		return 1
	}
	return 0
}
