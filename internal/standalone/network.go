package standalone

import (
	"context"
	"fmt"
	"io"

	"github.com/virtlauncher/virtlauncher/internal/netsetup"
	"github.com/virtlauncher/virtlauncher/internal/pod"
)

// setupNetwork makes the pod's network (internal/pod) when the VMI has
// masquerade or bridge interfaces, virt-handler's privileged phase
// included. It runs before the hand-over, while root alone can write the
// work dir: the vif caches in private/ go to the launcher's user with the
// rest of its directories (handOver); the restore state, which root acts
// on at the end, stays in the work dir, root's.
func (r *runner) setupNetwork(ctx context.Context) error {
	n, err := pod.NewNetwork(ctx, pod.NetworkConfig{Dir: r.workDir, Name: r.netName, VMI: r.vmi,
		Privileged: netsetup.PrivilegedConfig{QemuUID: r.owner.uid, QemuGID: r.owner.gid,
			CacheDir: r.layout.PrivateDir, StateDir: r.workDir},
		Log: r.log})
	if err != nil {
		return err
	}
	r.net = n
	return nil
}

func printForwards(w io.Writer, n *pod.Network) {
	for _, f := range n.Forwards(n.Plan) {
		if f.Port == 0 {
			fmt.Fprintf(w, "vlctl: interface %s: every port of the guest is reachable at %s (from namespace %s)\n", f.Iface, f.Address, n.OutsideName)
			continue
		}
		fmt.Fprintf(w, "vlctl: interface %s: guest %s/%d is reachable at %s (from namespace %s)\n", f.Iface, f.Protocol, f.Port, f.Address, n.OutsideName)
	}
}
