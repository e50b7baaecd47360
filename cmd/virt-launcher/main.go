// Command virt-launcher runs one VirtualMachineInstance through a private
// libvirt daemon, driven by virt-handler (or vlctl) over KubeVirt's command
// protocol. See internal/launcher.
package main

import (
	"context"
	"errors"
	"flag"
	"os"

	"github.com/virtlauncher/virtlauncher/internal/launcher"
	"github.com/virtlauncher/virtlauncher/internal/logging"
)

func main() {
	opts, err := launcher.Parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Stderr.WriteString("virt-launcher: " + err.Error() + "\n")
		os.Exit(launcher.ExitFatal)
	}
	log := logging.New(os.Stderr, "virt-launcher", logging.Verbosity(opts.Verbosity))
	if opts.Name != "" {
		log = log.With("kind", "VirtualMachineInstance", "name", opts.Name, "namespace", opts.Namespace, "uid", opts.UID)
	}
	os.Exit(launcher.New(opts, log).Run(context.Background()))
}
