// Command virtiofsd is the launcher image's /usr/libexec/virtiofsd: it
// takes the command line KubeVirt's virt-controller gives the virtiofs
// containers of a VMI's pod (the Rust virtiofsd's flags) and runs QEMU
// 7.2's virtiofsd, the one Debian 12 ships, with the same meaning
// (internal/virtiofsd). A flag it cannot translate is refused by name,
// with exit status 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/virtiofsd"
)

func main() {
	plan, err := virtiofsd.Translate(os.Args[1:], os.Getuid(), os.Getgid())
	if err != nil {
		fmt.Fprintf(os.Stderr, "virtiofsd: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	err = virtiofsd.Run(ctx, plan, virtiofsd.CBinary, os.Stdout, os.Stderr)
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		stop()
		if exit.ExitCode() >= 0 {
			os.Exit(exit.ExitCode())
		}
		os.Exit(1)
	default:
		fmt.Fprintf(os.Stderr, "virtiofsd: %v\n", err)
		os.Exit(1)
	}
}
