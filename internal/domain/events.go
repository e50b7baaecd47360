package domain

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/agent"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// watcher follows the manager's domain: it handles libvirt's lifecycle
// and agent events, refreshes the cached Domain from the daemon and queues
// what changed (refresh), and records a domain's stop (markStopped).
type watcher struct {
	// rec holds the cached Domain, the run state and the panics it keeps,
	// and the identity and metadata it reads.
	rec  *record
	find finder
	log  *slog.Logger
	out  *outbox
	// guest is the guest agent: its reports go into the Domain, and its
	// poller runs while the guest does with its agent connected.
	guest *agent.Guest
	// qemuLogDir is where the daemon writes the domain's QEMU log ("":
	// unknown), read for a guest panic's details.
	qemuLogDir string
	// saveState writes the manager's state file (stateFile.saveState)
	// after each refresh; dropStats drops the cached stats
	// (statsSource.drop); warmCaps warms the daemon's host capabilities
	// once a domain runs (warmHostCapabilities); arrived follows an
	// incoming migration's domain (migrations.migrationArrived).
	saveState func()
	dropStats func()
	warmCaps  func(ctx context.Context, l *libvirt.Libvirt)
	arrived   func(ctx context.Context, ev libvirt.DomainEventLifecycleMsg)

	refreshMu sync.Mutex // keeps cache updates and their events in order
}

// eventLoop handles lifecycle events and the others connectDaemon
// subscribes to (guest agent, devices) until the connection drops.
func (x *watcher) eventLoop(ctx context.Context, l *libvirt.Libvirt, events <-chan libvirt.DomainEventLifecycleMsg, others <-chan any) {
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
			x.handle(ctx, ev)
		case ev, ok := <-others:
			if !ok {
				return
			}
			switch msg := ev.(type) {
			case *libvirt.DomainEventCallbackAgentLifecycleMsg:
				x.handleAgent(ctx, msg)
			case *libvirt.DomainEventCallbackDeviceAddedMsg:
				x.handleDevice(ctx, msg.Dom, msg.DevAlias, "added")
			case *libvirt.DomainEventCallbackDeviceRemovedMsg:
				x.handleDevice(ctx, msg.Msg.Dom, msg.Msg.DevAlias, "removed")
			}
		case <-x.guest.Store().Changed():
			// The guest agent reported new interfaces, OS info or freeze
			// state: KubeVirt's notifier sends the Domain again.
			x.refresh(ctx, EventModified, true)
		}
	}
}

// handleAgent follows the guest agent connecting or going away. The new
// state is in the live XML (the org.qemu.guest_agent.0 channel's target
// state, which virt-handler reads for AgentConnected), so, as KubeVirt's
// notifier does, the Domain is re-read and sent as MODIFIED.
func (x *watcher) handleAgent(ctx context.Context, ev *libvirt.DomainEventCallbackAgentLifecycleMsg) {
	domName, _, _ := x.rec.names()
	if !agentEventApplies(domName, ev) {
		return
	}
	x.log.Info("guest agent lifecycle event", "domain", ev.Dom.Name,
		"state", libvirt.ConnectDomainEventAgentLifecycleState(ev.State).String(),
		"reason", libvirt.ConnectDomainEventAgentLifecycleReason(ev.Reason).String())
	x.refresh(ctx, EventModified, true)
}

// handleDevice follows a device of domain dom added or removed: the live
// XML changed, so, as KubeVirt's notifier does, the Domain is re-read and
// sent as MODIFIED. A removal QEMU finishes after the detach call returned
// (the guest answered late), or that a restarted daemon found finished,
// reaches GetDomain and virt-handler only this way.
func (x *watcher) handleDevice(ctx context.Context, dom libvirt.Domain, alias, what string) {
	if domName, _, _ := x.rec.names(); domName != "" && dom.Name != domName {
		return
	}
	x.log.Info("device "+what, "domain", dom.Name, "alias", alias)
	x.refresh(ctx, EventModified, true)
}

// agentEventApplies tells whether an agent lifecycle event concerns the
// launcher's domain (domName empty: not learnt yet, any domain is ours).
// Whatever the state it reports, the Domain is re-read, as KubeVirt does:
// the live XML, not the event, is what the Domain says.
func agentEventApplies(domName string, ev *libvirt.DomainEventCallbackAgentLifecycleMsg) bool {
	return domName == "" || ev.Dom.Name == domName
}

func (x *watcher) handle(ctx context.Context, ev libvirt.DomainEventLifecycleMsg) {
	domName, name, ns := x.rec.names()
	if domName != "" && ev.Dom.Name != domName {
		return
	}
	x.log.Debug("libvirt lifecycle event", "domain", ev.Dom.Name, "event", ev.Event, "detail", ev.Detail)
	ref := VMIRef{Name: name, Namespace: ns, UID: x.rec.uidValue()}
	if libvirt.DomainEventType(ev.Event) == libvirt.DomainEventCrashed {
		// Before the read: the Domain sent for this event counts it.
		x.guestPanic(ev.Detail, ev.Dom.Name, ref)
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
	x.refresh(ctx, typ, true)
	x.arrived(ctx, ev)

	if libvirt.DomainEventType(ev.Event) == libvirt.DomainEventSuspended &&
		libvirt.DomainEventSuspendedDetailType(ev.Detail) == libvirt.DomainEventSuspendedIoerror {
		x.ioErrorEvents(ref)
	}
}

// ioErrorEvents sends one IOerror K8s event per failing disk
// (kubevirt-wire.md 2.4).
func (x *watcher) ioErrorEvents(ref VMIRef) {
	l, d, ok, err := x.find.lookupNow()
	if err != nil || !ok {
		return
	}
	errs, _, err := l.DomainGetDiskErrors(d, 16, 0)
	if err != nil {
		x.log.Warn("read disk errors", "reason", err.Error())
		return
	}
	for _, e := range errs {
		// go-libvirt does not export the error code, so "no space" cannot
		// be told apart here.
		msg := "VM Paused due to IO error at the volume: " + e.Disk
		x.out.queue(outEvent{k8s: true, ref: ref, k8sType: "Warning", reason: "IOerror", message: msg})
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.refreshMu.Lock()
		defer x.refreshMu.Unlock()
		x.refreshLocked(ctx, typ, emit)
		// What the domain object shows (its metadata) is what a
		// launcher taking over must know.
		x.saveState()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		x.log.Warn("refresh domain: the libvirt daemon did not answer in time, finishing in the background", "reason", ctx.Err().Error())
	}
}

func (x *watcher) refreshLocked(ctx context.Context, typ string, emit bool) {
	// Whatever changed, the stats answer from before may not show it.
	x.dropStats()
	_, name, ns := x.rec.names()
	l, d, ok, err := x.find.lookupNow()
	if err != nil {
		x.log.Warn("refresh domain", "reason", err.Error())
		return
	}
	var obj *domainjson.Domain
	var st libvirt.DomainState
	var reason int32
	if ok {
		obj, st, reason, err = x.read(l, d, name, ns)
		if err != nil && libvirt.IsNotFound(err) {
			// Undefined between the lookup and the read.
			ok = false
		} else if err != nil {
			x.log.Warn("refresh domain", "reason", err.Error())
			return
		}
	}
	if !ok {
		x.guest.SetPolling(false)
		x.rec.mu.Lock()
		wasDefined := x.rec.run.defined
		x.rec.run.defined = false
		x.rec.cache = nil
		md := x.rec.md
		x.rec.mu.Unlock()
		if wasDefined {
			x.markStopped(libvirt.DomainNostate, 0)
			x.out.queue(outEvent{typ: EventModified, gone: true, domain: domainjson.Gone(name, ns, md, time.Now())})
		}
		return
	}
	x.guest.Store().Overlay(&obj.Status)
	switchPoller(x.guest, obj, st)
	x.rec.mu.Lock()
	x.rec.panics.overlay(&obj.Status)
	x.rec.cache = obj
	if !x.rec.run.defined {
		x.rec.run.defined = true
		select {
		case <-x.rec.run.definedCh:
		default:
			close(x.rec.run.definedCh)
		}
	}
	if ran(st, reason) {
		x.rec.run.everActive = true
	}
	wasActive := x.rec.run.everActive
	x.rec.mu.Unlock()
	if !active(st) && wasActive {
		x.markStopped(st, reason)
	}
	if active(st) {
		x.warmCaps(ctx, l)
	}
	if emit {
		x.out.queue(outEvent{typ: typ, domain: obj})
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
	xml, err := l.DomainGetXMLDesc(d, 0)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("XML of domain %s: %w", d.Name, err)
	}
	var spec libvirtxml.Domain
	if err := spec.Unmarshal(xml); err != nil {
		return nil, 0, 0, fmt.Errorf("parse XML of domain %s: %w", d.Name, err)
	}
	st, reason, err := domainState(l, d)
	if err != nil {
		return nil, 0, 0, err
	}
	x.rec.mu.Lock()
	md := x.rec.md
	x.rec.mu.Unlock()
	if name == "" {
		// Learnt nothing yet (a domain left from an earlier launcher run):
		// KubeVirt's name is <namespace>_<name>.
		ns, name, _ = strings.Cut(d.Name, "_")
	}
	return domainjson.Build(name, ns, &spec, st, reason, md), st, reason, nil
}

func (x *watcher) markStopped(st libvirt.DomainState, reason int32) {
	x.rec.mu.Lock()
	defer x.rec.mu.Unlock()
	select {
	case <-x.rec.run.stoppedCh:
	default:
		x.rec.run.stopState, x.rec.run.stopReason = st, reason
		close(x.rec.run.stoppedCh)
	}
}

// qemuKilled records a QEMU that Kill ended without the daemon: the domain
// is reported destroyed (a MODIFIED event, as libvirt's own would be) and
// the launcher's wait for the guest's end is over. The daemon, once it
// answers again, reads the same end from QEMU's exit.
func (x *watcher) qemuKilled() {
	x.refreshMu.Lock()
	defer x.refreshMu.Unlock()
	x.guest.SetPolling(false)
	x.rec.mu.Lock()
	var obj *domainjson.Domain
	if x.rec.cache != nil {
		c := *x.rec.cache
		c.Status.Status, c.Status.Reason = domainjson.StateAndReason(libvirt.DomainShutoff, int32(libvirt.DomainShutoffDestroyed))
		x.rec.cache, obj = &c, &c
	}
	x.rec.mu.Unlock()
	x.markStopped(libvirt.DomainShutoff, int32(libvirt.DomainShutoffDestroyed))
	if obj != nil {
		x.out.queue(outEvent{typ: EventModified, domain: obj})
	}
}
