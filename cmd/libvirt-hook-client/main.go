// libvirt-hook-client is the launcher image's libvirt qemu hook
// (/etc/libvirt/hooks/qemu): it hands an incoming migration's domain XML to
// the launcher's pre-migration hook server, and marks a domain that
// migrated away (internal/premigration).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/virtlauncher/virtlauncher/internal/premigration"
)

func main() {
	socket := flag.String("socket", premigration.DefaultSocket, "the pre-migration hook server's socket")
	migrated := flag.String("migrated-marker", premigration.DefaultMigrated, "the file left when a domain migrated away")
	flag.Parse()
	if err := premigration.Call(flag.Args(), os.Stdin, os.Stdout, *socket, *migrated); err != nil {
		fmt.Fprintf(os.Stderr, "libvirt-hook-client: %v\n", err)
		os.Exit(1)
	}
}
