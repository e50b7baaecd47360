package standalone

import (
	"errors"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/guestnet"
	"github.com/virtlauncher/virtlauncher/internal/netsetup"
)

// publish points the published host ports at this run's pod, binding
// those not bound yet (the first boot): a port that cannot be bound fails
// the run before the guest boots. A run that took its guest over by
// migration got the old run's listeners with it (adopt) and only points
// them; a port the old run did not hand over (an older vlctl) is bound
// once the old run lets go of it, waited for up to wait.
func (r *runner) publish(wait time.Duration) error {
	if len(r.cfg.Publish) == 0 {
		return nil
	}
	if r.net == nil {
		return errors.New("--publish: the VMI has no pod network interface to publish ports of")
	}
	if err := guestnet.CheckPublished(r.net, r.cfg.Publish); err != nil {
		return err
	}
	if err := r.cfg.ports.Bind(r.cfg.Publish, wait); err != nil {
		return err
	}
	r.cfg.ports.Point(&guestnet.PodTarget{Outside: r.net.Outside, Addr: r.net.Pod4.Addr()})
	r.pub = r.cfg.ports
	for _, pb := range r.cfg.Publish {
		r.progress("published %s", pb)
	}
	return nil
}

// startEgress sets up the guest's way out (guestnet.ServeEgress); without
// a pod network, or with --no-egress, there is none.
func (r *runner) startEgress() error {
	if r.net == nil || r.cfg.NoEgress {
		return nil
	}
	rl, err := guestnet.ServeEgress(r.net.Pod, guestnet.IDs{UID: r.owner.UID, GID: r.owner.GID}, r.cfg.Status)
	if err != nil {
		return err
	}
	r.egress = rl
	r.progress("guest egress: TCP to the addresses this host reaches, relayed as %s (not the host's own addresses, loopback, link-local or cloud metadata services)", r.owner.Name)
	return nil
}

// stopEgress ends the relay and its redirect.
func (r *runner) stopEgress() error {
	if r.egress == nil {
		return nil
	}
	r.egress.Close()
	r.egress = nil
	return netsetup.RemoveEgress(r.net.Outside)
}
