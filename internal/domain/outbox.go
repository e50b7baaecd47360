package domain

import (
	"context"
	"log/slog"
	"sync"
)

// outbox delivers the manager's events to its EventSink, in order, from
// one goroutine (sendLoop), so that a slow sink never blocks the manager.
type outbox struct {
	sink EventSink // nil: events are only logged
	log  *slog.Logger

	events chan outEvent

	mu sync.Mutex
	// goneSent is closed after the final "domain gone" event was handed
	// to the sink (delivered, or given up on).
	goneSent chan struct{}
}

func newOutbox(sink EventSink, log *slog.Logger) *outbox {
	return &outbox{sink: sink, log: log, events: make(chan outEvent, 1024), goneSent: make(chan struct{})}
}

func (o *outbox) queue(ev outEvent) {
	select {
	case o.events <- ev:
	default:
		// The sink is stuck (no handler listening): drop rather than block
		// the manager. virt-handler's periodic GetDomain repairs the state.
		o.log.Warn("event queue full, dropping event", "type", ev.typ, "reason", ev.reason)
		if ev.gone {
			o.closeGoneSent()
		}
	}
}

func (o *outbox) closeGoneSent() {
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-o.goneSent:
	default:
		close(o.goneSent)
	}
}

// sendLoop hands events to the sink one at a time, in order.
func (o *outbox) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-o.events:
			o.send(ctx, ev)
		}
	}
}

func (o *outbox) send(ctx context.Context, ev outEvent) {
	sink := o.sink
	switch {
	case ev.k8s:
		o.log.Info("k8s event", "type", ev.k8sType, "reason", ev.reason, "message", ev.message)
		if sink != nil {
			if err := sink.K8sEvent(ctx, ev.ref, ev.k8sType, ev.reason, ev.message); err != nil {
				o.log.Warn("send k8s event", "reason", err.Error())
			}
		}
	default:
		o.log.Info("domain event", "type", ev.typ, "status", ev.domain.Status.Status, "statusReason", ev.domain.Status.Reason)
		if sink != nil {
			if err := sink.DomainEvent(ctx, ev.typ, ev.domain); err != nil {
				o.log.Warn("send domain event", "type", ev.typ, "reason", err.Error())
			}
		}
		if ev.gone {
			o.closeGoneSent()
		}
	}
}
