package pod

import (
	"context"
	"fmt"
	"os"
	"time"
)

// ExitedError says the pod's process ended while something waited for it
// to get somewhere.
type ExitedError struct{ Err error }

func (e *ExitedError) Error() string {
	if e.Err == nil {
		return "the pod's process exited (status 0)"
	}
	return fmt.Sprintf("the pod's process exited: %v", e.Err)
}

func (e *ExitedError) Unwrap() error { return e.Err }

// WaitFor calls cond every interval until it returns true (nil), the
// process exits (an *ExitedError) or ctx ends (ctx's error). cond gets the
// time of its call, for callers that stamp what they see.
func (p *Process) WaitFor(ctx context.Context, every time.Duration, cond func(now time.Time) bool) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if cond(time.Now()) {
			return nil
		}
		select {
		case <-p.done:
			return &ExitedError{Err: p.err}
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ReadyPoll is how often WaitReady looks for the socket.
const ReadyPoll = 20 * time.Millisecond

// WaitReady waits for the launcher's command socket, sock (the layout's
// ReadySocket: the name virt-handler waits for, which the launcher makes
// by a rename once it serves), as WaitFor does.
func (p *Process) WaitReady(ctx context.Context, sock string) error {
	return p.WaitFor(ctx, ReadyPoll, func(time.Time) bool {
		_, err := os.Stat(sock)
		return err == nil
	})
}
