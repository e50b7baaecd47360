package domain

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// watcher follows the Manager m's domain: it handles libvirt's lifecycle
// and agent events, refreshes the cached Domain from the daemon and queues
// what changed (refresh), and records a domain's stop (markStopped). It
// works on m's connection, cache, metadata and run state under m's lock.
type watcher struct {
	m *Manager

	refreshMu sync.Mutex // keeps cache updates and their events in order
}

// eventLoop handles lifecycle events and the others connectDaemon
// subscribes to (guest agent, devices) until the connection drops.
func (x *watcher) eventLoop(ctx context.Context, l *libvirt.Libvirt, events <-chan libvirt.DomainEventLifecycleMsg, others <-chan any) {
	m := x.m
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Disconnected():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			m.watch.handle(ctx, ev)
		case ev, ok := <-others:
			if !ok {
				return
			}
			switch msg := ev.(type) {
			case *libvirt.DomainEventCallbackAgentLifecycleMsg:
				m.watch.handleAgent(ctx, msg)
			case *libvirt.DomainEventCallbackDeviceAddedMsg:
				m.watch.handleDevice(ctx, msg.Dom, msg.DevAlias, "added")
			case *libvirt.DomainEventCallbackDeviceRemovedMsg:
				m.watch.handleDevice(ctx, msg.Msg.Dom, msg.Msg.DevAlias, "removed")
			}
		case <-m.guest.Store().Changed():
			// The guest agent reported new interfaces, OS info or freeze
			// state: KubeVirt's notifier sends the Domain again.
			m.watch.refresh(ctx, EventModified, true)
		}
	}
}

// handleAgent follows the guest agent connecting or going away. The new
// state is in the live XML (the org.qemu.guest_agent.0 channel's target
// state, which virt-handler reads for AgentConnected), so, as KubeVirt's
// notifier does, the Domain is re-read and sent as MODIFIED.
func (x *watcher) handleAgent(ctx context.Context, ev *libvirt.DomainEventCallbackAgentLifecycleMsg) {
	m := x.m
	domName, _, _ := m.names()
	if !agentEventApplies(domName, ev) {
		return
	}
	m.log.Info("guest agent lifecycle event", "domain", ev.Dom.Name,
		"state", libvirt.ConnectDomainEventAgentLifecycleState(ev.State).String(),
		"reason", libvirt.ConnectDomainEventAgentLifecycleReason(ev.Reason).String())
	m.watch.refresh(ctx, EventModified, true)
}

// handleDevice follows a device of domain dom added or removed: the live
// XML changed, so, as KubeVirt's notifier does, the Domain is re-read and
// sent as MODIFIED. A removal QEMU finishes after the detach call returned
// (the guest answered late), or that a restarted daemon found finished,
// reaches GetDomain and virt-handler only this way.
func (x *watcher) handleDevice(ctx context.Context, dom libvirt.Domain, alias, what string) {
	m := x.m
	if domName, _, _ := m.names(); domName != "" && dom.Name != domName {
		return
	}
	m.log.Info("device "+what, "domain", dom.Name, "alias", alias)
	m.watch.refresh(ctx, EventModified, true)
}

// agentEventApplies tells whether an agent lifecycle event concerns the
// launcher's domain (domName empty: not learnt yet, any domain is ours).
// Whatever the state it reports, the Domain is re-read, as KubeVirt does:
// the live XML, not the event, is what the Domain says.
func agentEventApplies(domName string, ev *libvirt.DomainEventCallbackAgentLifecycleMsg) bool {
	return domName == "" || ev.Dom.Name == domName
}

func (x *watcher) handle(ctx context.Context, ev libvirt.DomainEventLifecycleMsg) {
	m := x.m
	domName, name, ns := m.names()
	if domName != "" && ev.Dom.Name != domName {
		return
	}
	m.log.Debug("libvirt lifecycle event", "domain", ev.Dom.Name, "event", ev.Event, "detail", ev.Detail)
	ref := VMIRef{Name: name, Namespace: ns, UID: m.uidValue()}
	if libvirt.DomainEventType(ev.Event) == libvirt.DomainEventCrashed {
		// Before the read: the Domain sent for this event counts it.
		m.watch.guestPanic(ev.Detail, ev.Dom.Name, ref)
	}
	typ := EventModified
	switch libvirt.DomainEventType(ev.Event) {
	case libvirt.DomainEventDefined:
		if libvirt.DomainEventDefinedDetailType(ev.Detail) == libvirt.DomainEventDefinedAdded {
			typ = EventAdded
		}
	case libvirt.DomainEventStarted:
		// A domain that arrives by migration is new to virt-handler on
		// this node, as a defined one is (KubeVirt's notifier).
		if libvirt.DomainEventStartedDetailType(ev.Detail) == libvirt.DomainEventStartedMigrated {
			typ = EventAdded
		}
	}
	m.watch.refresh(ctx, typ, true)
	m.mig.migrationArrived(ctx, ev)

	if libvirt.DomainEventType(ev.Event) == libvirt.DomainEventSuspended &&
		libvirt.DomainEventSuspendedDetailType(ev.Detail) == libvirt.DomainEventSuspendedIoerror {
		m.watch.ioErrorEvents(ref)
	}
}

// ioErrorEvents sends one IOerror K8s event per failing disk
// (kubevirt-wire.md 2.4).
func (x *watcher) ioErrorEvents(ref VMIRef) {
	m := x.m
	l, d, ok, err := m.lookupNow()
	if err != nil || !ok {
		return
	}
	errs, _, err := l.DomainGetDiskErrors(d, 16, 0)
	if err != nil {
		m.log.Warn("read disk errors", "reason", err.Error())
		return
	}
	for _, e := range errs {
		// go-libvirt does not export the error code, so "no space" cannot
		// be told apart here.
		msg := "VM Paused due to IO error at the volume: " + e.Disk
		m.out.queue(outEvent{k8s: true, ref: ref, k8sType: "Warning", reason: "IOerror", message: msg})
	}
}

// refresh re-reads the domain and updates the cache. When emit is set it
// sends the object as an event of type typ; a domain that has disappeared
// becomes the "gone" object (MODIFIED with a deletion timestamp).
//
// The caller waits at most until ctx ends: a daemon that does not answer
// (stopped, hung) must not hold a shutdown. The refresh then finishes in
// the background, still in order with the ones after it.
func (x *watcher) refresh(ctx context.Context, typ string, emit bool) {
	m := x.m
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.watch.refreshMu.Lock()
		defer m.watch.refreshMu.Unlock()
		m.watch.refreshLocked(ctx, typ, emit)
		// What the domain object shows (its metadata) is what a
		// launcher taking over must know.
		m.persist.saveState()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		m.log.Warn("refresh domain: the libvirt daemon did not answer in time, finishing in the background", "reason", ctx.Err().Error())
	}
}

func (x *watcher) refreshLocked(ctx context.Context, typ string, emit bool) {
	m := x.m
	// Whatever changed, the stats answer from before may not show it.
	m.stats.drop()
	_, name, ns := m.names()
	l, d, ok, err := m.lookupNow()
	if err != nil {
		m.log.Warn("refresh domain", "reason", err.Error())
		return
	}
	var obj *domainjson.Domain
	var st libvirt.DomainState
	var reason int32
	if ok {
		obj, st, reason, err = m.watch.read(l, d, name, ns)
		if err != nil && libvirt.IsNotFound(err) {
			// Undefined between the lookup and the read.
			ok = false
		} else if err != nil {
			m.log.Warn("refresh domain", "reason", err.Error())
			return
		}
	}
	if !ok {
		m.guest.SetPolling(false)
		m.mu.Lock()
		wasDefined := m.run.defined
		m.run.defined = false
		m.cache = nil
		md := m.md
		m.mu.Unlock()
		if wasDefined {
			m.watch.markStopped(libvirt.DomainNostate, 0)
			m.out.queue(outEvent{typ: EventModified, gone: true, domain: domainjson.Gone(name, ns, md, time.Now())})
		}
		return
	}
	m.guest.Store().Overlay(&obj.Status)
	switchPoller(m.guest, obj, st)
	m.mu.Lock()
	m.panics.overlay(&obj.Status)
	m.cache = obj
	if !m.run.defined {
		m.run.defined = true
		select {
		case <-m.run.definedCh:
		default:
			close(m.run.definedCh)
		}
	}
	if ran(st, reason) {
		m.run.everActive = true
	}
	wasActive := m.run.everActive
	m.mu.Unlock()
	if !active(st) && wasActive {
		m.watch.markStopped(st, reason)
	}
	if active(st) {
		m.warmHostCapabilities(ctx, l)
	}
	if emit {
		m.out.queue(outEvent{typ: typ, domain: obj})
	}
}

// ran says that a domain in state st (reason) has run: it is active and
// past libvirt's start. A QEMU still starting up (paused, reason starting
// up) that ends is a start that failed, as when the daemon dies midway
// and its successor kills the half-started QEMU: the first Sync fails,
// and virt-handler's next Sync starts the domain again, so the launcher
// must not end for it.
func ran(st libvirt.DomainState, reason int32) bool {
	if st == libvirt.DomainPaused && libvirt.DomainPausedReason(reason) == libvirt.DomainPausedStartingUp {
		return false
	}
	return active(st)
}

// read builds the Domain JSON object of the live domain.
func (x *watcher) read(l *libvirt.Libvirt, d libvirt.Domain, name, ns string) (*domainjson.Domain, libvirt.DomainState, int32, error) {
	m := x.m
	xml, err := l.DomainGetXMLDesc(d, 0)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("XML of domain %s: %w", d.Name, err)
	}
	var spec libvirtxml.Domain
	if err := spec.Unmarshal(xml); err != nil {
		return nil, 0, 0, fmt.Errorf("parse XML of domain %s: %w", d.Name, err)
	}
	st, reason, err := m.state(l, d)
	if err != nil {
		return nil, 0, 0, err
	}
	m.mu.Lock()
	md := m.md
	m.mu.Unlock()
	if name == "" {
		// Learnt nothing yet (a domain left from an earlier launcher run):
		// KubeVirt's name is <namespace>_<name>.
		ns, name, _ = strings.Cut(d.Name, "_")
	}
	return domainjson.Build(name, ns, &spec, st, reason, md), st, reason, nil
}

func (x *watcher) markStopped(st libvirt.DomainState, reason int32) {
	m := x.m
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.run.stoppedCh:
	default:
		m.run.stopState, m.run.stopReason = st, reason
		close(m.run.stoppedCh)
	}
}
