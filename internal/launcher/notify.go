package launcher

import (
	"context"
	"log/slog"

	"github.com/virtlauncher/virtlauncher/internal/domain"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// notifySink is where events go until the notify client lands: they are
// logged by the manager and dropped here.
type notifySink struct {
	sock string
	log  *slog.Logger
}

func newNotifySink(sock string, log *slog.Logger) domain.EventSink {
	return notifySink{sock: sock, log: log}
}

func (n notifySink) DomainEvent(ctx context.Context, eventType string, d *domainjson.Domain) error {
	return nil
}

func (n notifySink) K8sEvent(ctx context.Context, vmi domain.VMIRef, eventType, reason, message string) error {
	return nil
}
