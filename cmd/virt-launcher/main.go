// Command virt-launcher runs one VirtualMachineInstance through a private
// libvirt daemon, driven by virt-handler (or vlctl) over KubeVirt's command
// protocol. See internal/launcher.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"runtime/debug"

	"github.com/virtlauncher/virtlauncher/internal/launcher"
	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/logging"
)

func main() {
	// The launcher's heap is a few MiB of long-lived state (the VMI, the
	// domain, gRPC and libvirt connections) and a little garbage per Sync:
	// half the default GC target costs a few more short collections during
	// the start and keeps about 0.5 MiB less heap in every pod (measured
	// with bench/). GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	opts, err := launcherflags.Parse(os.Args[1:], os.Stderr)
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
