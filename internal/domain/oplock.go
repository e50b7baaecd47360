package domain

import (
	"context"
	"fmt"
)

// opLock lets one domain operation run at a time. Unlike a mutex, waiting
// for it ends with the caller's context: an RPC whose client has given up
// (its gRPC deadline passed while an earlier operation ran) is never
// carried out later, out of the order the handler meant (a stale Sync
// after a Kill would start the guest again).
type opLock chan struct{}

func newOpLock() opLock { return make(opLock, 1) }

// lock waits for the lock until ctx ends; a context that ended meanwhile
// is refused even when the lock came free at the same moment.
func (o opLock) lock(ctx context.Context) error {
	select {
	case o <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("not carried out: %w while the operation before it ran", ctx.Err())
	}
	if err := ctx.Err(); err != nil {
		<-o
		return fmt.Errorf("not carried out: %w while the operation before it ran", err)
	}
	return nil
}

func (o opLock) unlock() { <-o }
