package domain

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// record is what the manager knows of its VMI and domain that libvirt
// does not keep for it, under one lock (mu). The manager's parts that read
// or change it (stateFile, jobs, lifecycle, ...) are given the record, not
// the Manager.
type record struct {
	mu sync.Mutex
	id vmiIdentity // the VMI this launcher runs (checkIdentity)
	md domainjson.Metadata
	// cache is the Domain as last read (nil: no domain).
	cache  *domainjson.Domain
	panics panicRecord // the guest's panics, in every Domain sent
	run    runState    // the domain's existence and run state as last seen
	// capsWarmed is the connection whose daemon was asked to build its
	// host capabilities (warmHostCapabilities).
	capsWarmed *libvirt.Libvirt
	// runCtx is Run's context: the lifetime of what outlives a call (the
	// agent's poller, a migration, a backup); nil before Run.
	runCtx context.Context
	// targetOf is the migration this pod was prepared to receive
	// (PrepareMigrationTarget), "" when it is none's target.
	targetOf string
}

// vmiIdentity is the VMI a launcher runs: from the command line, or learnt
// from the first Sync.
type vmiIdentity struct{ name, ns, uid string }

// runState is what the manager last saw of its domain's existence and run.
type runState struct {
	defined    bool // the domain exists (as far as we last saw)
	everActive bool // the domain has run (ran): its end ends the launcher
	userPaused bool // the user paused it through us
	// definedCh is closed once a domain has been seen defined, stoppedCh
	// when one that ran no longer does (stopState and stopReason then).
	definedCh  chan struct{}
	stoppedCh  chan struct{}
	stopState  libvirt.DomainState
	stopReason int32
}

func newRecord(cfg Identity) *record {
	r := &record{
		id:  vmiIdentity{name: cfg.Name, ns: cfg.Namespace, uid: cfg.UID},
		run: runState{definedCh: make(chan struct{}), stoppedCh: make(chan struct{})},
	}
	r.md.UID = cfg.UID
	return r
}

// names returns the domain name and VMI identity.
func (r *record) names() (domName, name, ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id.name == "" {
		return "", "", ""
	}
	return DomainName(r.id.ns, r.id.name), r.id.name, r.id.ns
}

func (r *record) uidValue() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id.uid
}

// checkIdentity learns the VMI identity on the first Sync and refuses a
// different VMI afterwards.
func (r *record) checkIdentity(vmi *v1.VirtualMachineInstance, learn bool) error {
	if vmi == nil {
		return errors.New("no VMI in the request")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id.uid != "" && vmi.UID != "" && string(vmi.UID) != r.id.uid {
		return fmt.Errorf("refusing VMI %s/%s with uid %s: this launcher runs the VMI with uid %s", vmi.Namespace, vmi.Name, vmi.UID, r.id.uid)
	}
	if r.id.name != "" && (vmi.Name != r.id.name || vmi.Namespace != r.id.ns) {
		return fmt.Errorf("refusing VMI %s/%s: this launcher runs VMI %s/%s", vmi.Namespace, vmi.Name, r.id.ns, r.id.name)
	}
	if !learn {
		return nil
	}
	if vmi.Name == "" || vmi.Namespace == "" {
		return fmt.Errorf("VMI metadata.name %q and metadata.namespace %q must both be set", vmi.Name, vmi.Namespace)
	}
	if vmi.UID == "" && r.id.uid == "" {
		return fmt.Errorf("VMI %s/%s has no metadata.uid", vmi.Namespace, vmi.Name)
	}
	r.id.name, r.id.ns = vmi.Name, vmi.Namespace
	if r.id.uid == "" {
		r.id.uid = string(vmi.UID)
		r.md.UID = r.id.uid
	}
	return nil
}

// runContextLocked is Run's context, the background before Run (r.mu
// held).
func (r *record) runContextLocked() context.Context {
	if r.runCtx == nil {
		return context.Background()
	}
	return r.runCtx
}

// finder finds the launcher's domain, by the name its record holds, on
// the daemon connection.
type finder struct {
	conn *daemonConn
	rec  *record
}

// lookup finds our domain; ok=false when it does not exist. It waits for a
// connection until ctx ends.
func (f finder) lookup(ctx context.Context) (*libvirt.Libvirt, libvirt.Domain, bool, error) {
	l, err := f.conn.wait(ctx)
	if err != nil {
		return nil, libvirt.Domain{}, false, err
	}
	return f.lookupOn(l)
}

// lookupNow is lookup without waiting: the event loop runs in Run's
// goroutine, which is the one that would reconnect.
func (f finder) lookupNow() (*libvirt.Libvirt, libvirt.Domain, bool, error) {
	l := f.conn.now()
	if l == nil || !l.IsConnected() {
		return nil, libvirt.Domain{}, false, errors.New("not connected to libvirt")
	}
	return f.lookupOn(l)
}

func (f finder) lookupOn(l *libvirt.Libvirt) (*libvirt.Libvirt, libvirt.Domain, bool, error) {
	domName, _, _ := f.rec.names()
	if domName == "" {
		return l, libvirt.Domain{}, false, nil
	}
	d, err := l.DomainLookupByName(domName)
	if err != nil {
		if libvirt.IsNotFound(err) {
			return l, libvirt.Domain{}, false, nil
		}
		return nil, libvirt.Domain{}, false, fmt.Errorf("look up domain %s: %w", domName, err)
	}
	return l, d, true, nil
}

// domainState is libvirt's state of d and its reason.
func domainState(l *libvirt.Libvirt, d libvirt.Domain) (libvirt.DomainState, int32, error) {
	s, r, err := l.DomainGetState(d, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("state of domain %s: %w", d.Name, err)
	}
	return libvirt.DomainState(s), r, nil
}
