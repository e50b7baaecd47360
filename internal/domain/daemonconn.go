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
// the domain lifecycle events and, on one channel, to the other events
// after which KubeVirt's notifier sends the Domain again
// (notify-client/client.go): the guest agent connecting or going away
// (the channel's state in the live XML) and a device added or removed (a
// hotplug or unplug that QEMU finished after the call that asked for it,
// or that a restarted daemon found finished). go-libvirt routes by
// callback id, so SubscribeEvents delivers the *DomainEventCallback…Msg
// values.
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
	var others []<-chan any
	for _, sub := range []struct {
		id   libvirt.DomainEventID
		what string
	}{
		{libvirt.DomainEventIDAgentLifecycle, "guest agent lifecycle"},
		{libvirt.DomainEventIDDeviceAdded, "device added"},
		{libvirt.DomainEventIDDeviceRemoved, "device removed"},
	} {
		ch, err := l.SubscribeEvents(ctx, sub.id, libvirt.OptDomain{})
		if err != nil {
			disconnect(l)
			return nil, nil, nil, fmt.Errorf("subscribe to %s events: %w", sub.what, err)
		}
		others = append(others, ch)
	}
	return l, events, mergeEvents(ctx, l.Disconnected(), others...), nil
}

// mergeEvents delivers what chans deliver on one channel, which closes
// when all of them have. It stops delivering when ctx ends or gone is
// closed (the connection dropped): nobody reads the channel then.
func mergeEvents(ctx context.Context, gone <-chan struct{}, chans ...<-chan any) <-chan any {
	out := make(chan any)
	var wg sync.WaitGroup
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range ch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				case <-gone:
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
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
