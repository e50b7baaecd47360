package domain

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOpLock(t *testing.T) {
	o := newOpLock()
	if err := o.lock(context.Background()); err != nil {
		t.Fatalf("lock of a free lock: %v", err)
	}
	// A caller whose deadline passes while the first holds the lock is
	// refused, and never gets it later.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.lock(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("lock past its deadline: %v, want DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("lock did not give up at its deadline")
	}
	o.unlock()
	// An ended context is refused even with the lock free.
	cancel()
	if err := o.lock(ctx); err == nil {
		t.Fatal("lock with an ended context succeeded")
	}
	// The refused callers took nothing: the lock is free.
	if err := o.lock(context.Background()); err != nil {
		t.Fatalf("lock after refusals: %v", err)
	}
	o.unlock()
}
