// Package bounded bounds the launcher's blocking libvirt calls by a
// context: go-libvirt's calls take none.
package bounded

import (
	"context"
	"fmt"
	"time"
)

// Call runs the libvirt call f and returns when it does or when ctx ends,
// whichever is first, its error prefixed with what. On ctx's end f is left
// to finish on its own: it ends when the daemon answers or the connection
// drops.
func Call(ctx context.Context, what string, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// PollUntil calls done every 250 ms until it reports true (true), fails
// (its error) or ctx ends (false, nil): for what libvirt leaves pending,
// such as a device the guest has yet to release.
func PollUntil(ctx context.Context, done func() (bool, error)) (bool, error) {
	for {
		ok, err := done()
		if ok || err != nil {
			return ok, err
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}
