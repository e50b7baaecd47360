// Package notify is the launcher's client for virt-handler's notify
// socket (kubevirt-wire.md section 2): domain events (HandleDomainEvent) and
// Kubernetes events (HandleK8sEvent).
//
// virt-handler creates <share-dir>/domain-notify-pipe.sock only after it
// first connected to the launcher, and removes it when it drops the VMI,
// so early and late events must be retried: each event is tried every 1 s
// for up to 20 s, each attempt with a 5 s deadline, reconnecting after a
// transient error; after that the event is dropped with a log line (the
// handler's periodic GetDomain repairs its state). Events are delivered in
// the order they were queued, by one sender goroutine. Delivery is
// at-least-once: if the connection breaks after the handler processed an
// event but before its answer arrived, the event is sent again; events are
// upserts on the handler's side, so a repeat is harmless.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	notifyv1 "github.com/virtlauncher/virtlauncher/api/notify/v1"
	"github.com/virtlauncher/virtlauncher/api/notifyinfo"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
	"github.com/virtlauncher/virtlauncher/internal/unixgrpc"
)

// SocketName is the notify socket's name in the share dir.
const SocketName = "domain-notify-pipe.sock"

// Domain event types the launcher sends. KubeVirt's launcher never sends
// DELETED (deletion is MODIFIED with a deletion timestamp) and a launcher
// must never send ERROR (it breaks the handler's watch).
const (
	EventAdded    = "ADDED"
	EventModified = "MODIFIED"
)

// Kubernetes event types.
const (
	EventTypeNormal  = corev1.EventTypeNormal
	EventTypeWarning = corev1.EventTypeWarning
)

var (
	// ErrDropped is returned for an event that could not be delivered
	// within the retry time.
	ErrDropped = errors.New("notify event dropped")
	// ErrClosed is returned for events still queued when Close is called.
	ErrClosed = errors.New("notify client closed")
)

// Timing is the retry policy; tests shorten it.
type Timing struct {
	RetryInterval  time.Duration // between attempts
	MaxRetryTime   time.Duration // per event, then it is dropped
	AttemptTimeout time.Duration // per attempt (connect, Info, call)
}

// DefaultTiming is KubeVirt's launcher policy.
var DefaultTiming = Timing{RetryInterval: time.Second, MaxRetryTime: 20 * time.Second, AttemptTimeout: 5 * time.Second}

// supportedVersions are the notify versions this client speaks.
var supportedVersions = []uint32{1}

// VMI identifies the VMI a Kubernetes event is about.
type VMI struct {
	Name, Namespace, UID string
}

type item struct {
	desc   string
	domain *notifyv1.DomainEventRequest
	k8s    *notifyv1.K8SEventRequest
	result chan error
}

// Client sends events to the notify socket.
type Client struct {
	path   string
	log    *slog.Logger
	timing Timing

	mu     sync.Mutex
	queue  []*item
	wake   chan struct{}
	closed bool
	stop   chan struct{}
	done   chan struct{}

	conn *grpc.ClientConn // sender goroutine only
}

// New starts a client for the socket at socketPath with DefaultTiming.
func New(socketPath string, log *slog.Logger) *Client {
	return NewWithTiming(socketPath, log, DefaultTiming)
}

// NewWithTiming starts a client with a custom retry policy.
func NewWithTiming(socketPath string, log *slog.Logger, t Timing) *Client {
	c := &Client{
		path: socketPath, log: log, timing: t,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go c.run()
	return c
}

// QueueDomainEvent queues a domain event without waiting. The channel
// receives the outcome (nil once delivered).
func (c *Client) QueueDomainEvent(eventType string, d *domainjson.Domain) <-chan error {
	if eventType != EventAdded && eventType != EventModified {
		return failed(fmt.Errorf("domain event type %q: only %s and %s are sent", eventType, EventAdded, EventModified))
	}
	if d == nil {
		return failed(errors.New("domain event: no domain"))
	}
	if d.Name == "" || d.Namespace == "" {
		// The handler keys its informer by ObjectMeta namespace/name.
		return failed(fmt.Errorf("domain event: ObjectMeta name %q / namespace %q must be the VMI's", d.Name, d.Namespace))
	}
	data, err := json.Marshal(d)
	if err != nil {
		return failed(fmt.Errorf("encode domain event: %w", err))
	}
	desc := fmt.Sprintf("domain %s %s/%s (%s/%s)", eventType, d.Namespace, d.Name, d.Status.Status, d.Status.Reason)
	return c.enqueue(&item{desc: desc, domain: &notifyv1.DomainEventRequest{DomainJSON: data, EventType: eventType}})
}

// SendDomainEvent queues a domain event (ADDED or MODIFIED) and waits until
// it is delivered or dropped, or ctx ends (the event then stays queued).
func (c *Client) SendDomainEvent(ctx context.Context, eventType string, d *domainjson.Domain) error {
	return wait(ctx, c.QueueDomainEvent(eventType, d))
}

// QueueK8sEvent queues a Kubernetes event about vmi without waiting.
func (c *Client) QueueK8sEvent(vmi VMI, eventType, reason, message string) <-chan error {
	if eventType != EventTypeWarning && eventType != EventTypeNormal {
		return failed(fmt.Errorf("k8s event type %q: must be %s or %s", eventType, EventTypeWarning, EventTypeNormal))
	}
	if reason == "" {
		return failed(errors.New("k8s event: empty reason"))
	}
	if vmi.Name == "" || vmi.Namespace == "" || vmi.UID == "" {
		return failed(fmt.Errorf("k8s event: VMI identity incomplete (name %q, namespace %q, uid %q)", vmi.Name, vmi.Namespace, vmi.UID))
	}
	data, err := json.Marshal(K8sEvent(vmi, eventType, reason, message))
	if err != nil {
		return failed(fmt.Errorf("encode k8s event: %w", err))
	}
	desc := fmt.Sprintf("k8s event %s %s for %s/%s", eventType, reason, vmi.Namespace, vmi.Name)
	return c.enqueue(&item{desc: desc, k8s: &notifyv1.K8SEventRequest{EventJSON: data}})
}

// SendK8sEvent queues a Kubernetes event about vmi and waits like
// SendDomainEvent.
func (c *Client) SendK8sEvent(ctx context.Context, vmi VMI, eventType, reason, message string) error {
	return wait(ctx, c.QueueK8sEvent(vmi, eventType, reason, message))
}

// K8sEvent is the core/v1 Event the handler records against the VMI
// (kubevirt-wire.md 2.4); it reads only involvedObject, type, reason and
// message.
func K8sEvent(vmi VMI, eventType, reason, message string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{},
		InvolvedObject: corev1.ObjectReference{
			Kind:       "VirtualMachineInstance",
			APIVersion: "kubevirt.io/v1",
			Namespace:  vmi.Namespace,
			Name:       vmi.Name,
			UID:        types.UID(vmi.UID),
		},
		Type:    eventType,
		Reason:  reason,
		Message: message,
	}
}

// Close stops the sender; queued events fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.mu.Unlock()
	<-c.done
	return nil
}

func failed(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}

func wait(ctx context.Context, ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for notify delivery: %w", ctx.Err())
	}
}

func (c *Client) enqueue(it *item) <-chan error {
	it.result = make(chan error, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		it.result <- ErrClosed
		return it.result
	}
	c.queue = append(c.queue, it)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return it.result
}

func (c *Client) next() *item {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return nil
	}
	it := c.queue[0]
	c.queue = c.queue[1:]
	return it
}

func (c *Client) run() {
	defer close(c.done)
	defer c.disconnect()
	for {
		it := c.next()
		if it == nil {
			select {
			case <-c.wake:
				continue
			case <-c.stop:
				return
			}
		}
		err := c.deliver(it)
		it.result <- err
		if errors.Is(err, ErrClosed) {
			for it := c.next(); it != nil; it = c.next() {
				it.result <- ErrClosed
			}
			return
		}
	}
}

// deliver tries one event until it is delivered, fails permanently, or
// the retry time is over.
func (c *Client) deliver(it *item) error {
	deadline := time.Now().Add(c.timing.MaxRetryTime)
	attempts := 0
	for {
		if c.stopped() {
			return ErrClosed
		}
		attempts++
		err := c.attempt(it)
		if err == nil {
			return nil
		}
		if c.stopped() {
			return ErrClosed
		}
		if !transient(err) {
			c.log.Error("notify event rejected", "event", it.desc, "reason", err.Error())
			return fmt.Errorf("send %s: %w", it.desc, err)
		}
		c.disconnect()
		if time.Now().Add(c.timing.RetryInterval).After(deadline) {
			c.log.Error("dropping notify event: handler not reachable", "event", it.desc,
				"attempts", attempts, "reason", err.Error())
			return fmt.Errorf("send %s after %d attempts: %w: %v", it.desc, attempts, ErrDropped, err)
		}
		select {
		case <-time.After(c.timing.RetryInterval):
		case <-c.stop:
			return ErrClosed
		}
	}
}

func (c *Client) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// rejected is a definite answer from the handler: retrying will not help.
type rejected struct{ msg string }

func (r rejected) Error() string { return "handler rejected the event: " + r.msg }

// transient reports whether to reconnect and retry: Unavailable,
// DeadlineExceeded, Aborted and errors that are not gRPC statuses.
func transient(err error) bool {
	var r rejected
	if errors.As(err, &r) {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

func (c *Client) attempt(it *item) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.AttemptTimeout)
	defer cancel()
	go func() {
		// Close interrupts a running attempt.
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if c.conn == nil {
		conn, err := c.connect(ctx)
		if err != nil {
			return err
		}
		c.conn = conn
	}
	cl := notifyv1.NewNotifyClient(c.conn)
	var resp *notifyv1.Response
	var err error
	if it.domain != nil {
		resp, err = cl.HandleDomainEvent(ctx, it.domain)
	} else {
		resp, err = cl.HandleK8SEvent(ctx, it.k8s)
	}
	if err != nil {
		return err
	}
	if !resp.GetSuccess() {
		return rejected{msg: resp.GetMessage()}
	}
	return nil
}

// connect dials the socket and negotiates the notify version.
func (c *Client) connect(ctx context.Context) (*grpc.ClientConn, error) {
	path := c.path
	conn, err := unixgrpc.Dial(ctx, path, "")
	if err != nil {
		// Not a gRPC status: transient, retried.
		return nil, err
	}
	info, err := notifyinfo.NewNotifyInfoClient(conn).Info(ctx, &notifyinfo.NotifyInfoRequest{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	versions := slices.Clone(info.GetSupportedNotifyVersions())
	slices.Sort(versions)
	slices.Reverse(versions)
	for _, v := range versions {
		if slices.Contains(supportedVersions, v) {
			return conn, nil
		}
	}
	conn.Close()
	return nil, rejected{msg: fmt.Sprintf("no compatible notify version: handler offers %v, launcher supports %v", versions, supportedVersions)}
}

func (c *Client) disconnect() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}
