package standalone

import (
	"fmt"
	"io"

	"github.com/virtlauncher/virtlauncher/internal/pod"
)

func printForwards(w io.Writer, n *pod.Network) {
	for _, f := range n.Forwards(n.Plan) {
		if f.Port == 0 {
			fmt.Fprintf(w, "vlctl: interface %s: every port of the guest is reachable at %s (from namespace %s)\n", f.Iface, f.Address, n.OutsideName)
			continue
		}
		fmt.Fprintf(w, "vlctl: interface %s: guest %s/%d is reachable at %s (from namespace %s)\n", f.Iface, f.Protocol, f.Port, f.Address, n.OutsideName)
	}
}
