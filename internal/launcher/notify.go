package launcher

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/notify"
)

// notifySink adapts the notify client to the manager's EventSink.
//
// The handler creates the notify pipe in the pod only after it first
// connects to launcher-sock, which is before its first Sync, so before any
// domain exists. Without the pipe there is no handler (standalone): events
// are dropped at once instead of being retried for 20 s each, which would
// only delay the launcher's exit. With the pipe, events are queued in order
// and only the final "domain gone" event is waited for (the launcher must
// not exit before the handler saw it).
type notifySink struct {
	sock   string
	log    *slog.Logger
	client *notify.Client
}

func newNotifySink(sock string, log *slog.Logger) *notifySink {
	return &notifySink{sock: sock, log: log, client: notify.New(sock, log)}
}

func (n *notifySink) handlerPresent() bool {
	_, err := os.Stat(n.sock)
	return err == nil
}

func (n *notifySink) DomainEvent(ctx context.Context, eventType string, d *domainjson.Domain) error {
	if !n.handlerPresent() {
		n.log.Debug("no notify pipe (no handler), event not sent", "type", eventType)
		return nil
	}
	ch := n.client.QueueDomainEvent(eventType, d)
	if d.DeletionTimestamp == nil {
		return nil
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *notifySink) K8sEvent(ctx context.Context, vmi domain.VMIRef, eventType, reason, message string) error {
	if !n.handlerPresent() {
		return nil
	}
	n.client.QueueK8sEvent(notify.VMI{Name: vmi.Name, Namespace: vmi.Namespace, UID: vmi.UID}, eventType, reason, message)
	return nil
}

func (n *notifySink) Close() error {
	if err := n.client.Close(); err != nil && !errors.Is(err, notify.ErrClosed) {
		return err
	}
	return nil
}
