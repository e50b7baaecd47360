package main

import (
	"context"
	"sync"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/notify/notifytest"
)

// stamped is one notify event with the time the bench received it.
type stamped struct {
	at      time.Time
	typ     string
	status  string
	deleted bool
	// disks are the domain's disks as the event shows them (hotplug).
	disks []diskSeen
}

// diskSeen is one disk of a domain event: its alias without the "ua-"
// prefix (the VMI's disk name for the VMI's disks) and its target.
type diskSeen struct{ name, target string }

// domainEvents is virt-handler's notify server of one instance and every
// event it received, stamped as it arrived; the timing parts wait on it.
type domainEvents struct {
	server *notifytest.Server

	mu   sync.Mutex
	seen []stamped
	ch   chan struct{} // closed and replaced on every event
}

// record stamps every notify event as it arrives, until ctx ends or the
// server stops.
func (d *domainEvents) record(ctx context.Context) {
	for n := 1; ; n++ {
		evs, err := d.server.WaitFor(ctx, n)
		if err != nil {
			return
		}
		now := time.Now()
		d.mu.Lock()
		for _, e := range evs[len(d.seen):] {
			if e.Domain == nil {
				continue
			}
			s := stamped{at: now, typ: e.EventType, status: e.Domain.Status.Status, deleted: e.Domain.ObjectMeta.DeletionTimestamp != nil}
			for _, d := range e.Domain.Spec.Devices.Disks {
				if d.Alias != nil {
					s.disks = append(s.disks, diskSeen{name: d.Alias.Name, target: d.Target.Device})
				}
			}
			d.seen = append(d.seen, s)
		}
		// Keep the count aligned with the server's, also for K8s events.
		for len(d.seen) < len(evs) {
			d.seen = append(d.seen, stamped{at: now, typ: "K8S"})
		}
		close(d.ch)
		d.ch = make(chan struct{})
		d.mu.Unlock()
		n = len(evs)
	}
}

// first is the time of the first event at or after since that match
// accepts, and a channel closed on the next event when there is none yet.
func (d *domainEvents) first(since time.Time, match func(stamped) bool) (time.Time, bool, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.seen {
		if !e.at.Before(since) && match(e) {
			return e.at, true, nil
		}
	}
	return time.Time{}, false, d.ch
}

// lastDisks are the disks of the latest event that listed any; nil before
// one did.
func (d *domainEvents) lastDisks() []diskSeen {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.seen) - 1; i >= 0; i-- {
		if d.seen[i].disks != nil {
			return d.seen[i].disks
		}
	}
	return nil
}
