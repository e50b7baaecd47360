package domain

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/libvirtd"
)

// daemonConn is the manager's connection to its daemon: the one Run
// (re)connects, which the manager's own reads use at once and the calls
// once it is published (after the domain was read through it).
type daemonConn struct {
	mu sync.Mutex
	l  *libvirt.Libvirt
	// ready is closed while l is usable by the calls (publish).
	ready chan struct{}
}

// connectDaemon connects to the daemon at socket (uri) and subscribes to
// the domain lifecycle and guest agent lifecycle events.
func connectDaemon(ctx context.Context, socket, uri string) (*libvirt.Libvirt, <-chan libvirt.DomainEventLifecycleMsg, <-chan any, error) {
	l := libvirt.NewWithDialer(libvirtd.SocketDialer(socket))
	if err := l.ConnectToURI(libvirt.ConnectURI(uri)); err != nil {
		return nil, nil, nil, fmt.Errorf("connect %s at %s: %w", uri, socket, err)
	}
	events, err := l.LifecycleEvents(ctx)
	if err != nil {
		disconnect(l)
		return nil, nil, nil, fmt.Errorf("subscribe to lifecycle events: %w", err)
	}
	// Guest-agent connect/disconnect changes the channel state in the live
	// XML without a lifecycle event; KubeVirt's notifier subscribes to it
	// to re-send the Domain (notify-client/client.go). go-libvirt routes
	// by callback id, so SubscribeEvents delivers the
	// *DomainEventCallbackAgentLifecycleMsg values.
	agentEvents, err := l.SubscribeEvents(ctx, libvirt.DomainEventIDAgentLifecycle, libvirt.OptDomain{})
	if err != nil {
		disconnect(l)
		return nil, nil, nil, fmt.Errorf("subscribe to guest agent lifecycle events: %w", err)
	}
	return l, events, agentEvents, nil
}

// set makes l the connection the manager's own reads use (lookupNow);
// the calls wait for publish.
func (c *daemonConn) set(l *libvirt.Libvirt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l = l
}

// publish lets the calls waiting for a connection (wait) have it,
// once the domain has been read through it. A call let in before that
// read would see the domain as the last read before the daemon's death
// had it: a disk attached just before the death, whose read afterwards
// failed, missing from GetDomain after a Sync that found nothing to do.
func (c *daemonConn) publish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.ready)
}

func (c *daemonConn) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.l = nil
	c.ready = make(chan struct{})
}

// now is the connection without waiting, nil when there is none.
func (c *daemonConn) now() *libvirt.Libvirt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l
}

// wait returns the live connection, waiting for one until ctx ends.
func (c *daemonConn) wait(ctx context.Context) (*libvirt.Libvirt, error) {
	for {
		c.mu.Lock()
		l, ready := c.l, c.ready
		c.mu.Unlock()
		published := false
		select {
		case <-ready:
			published = true
		default:
		}
		if l != nil && published && l.IsConnected() {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no connection to libvirt: %w", ctx.Err())
		case <-ready:
		case <-time.After(50 * time.Millisecond):
		}
	}
}
