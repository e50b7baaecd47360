package domain

import (
	"context"
	"sync"
	"time"
)

// KubeVirt's launcher answers GetDomainStats from a cache that a goroutine
// refreshes every 3.25 s for the launcher's whole life (manager.go's
// domainStatsCache, a TimeDefinedCache kept updated): the handler's call
// is a memory read, at the price of a libvirt stats round (QEMU monitor
// queries) every 3.25 s per VM whether anyone asks or not. Ours keeps the
// same bound on the answer's age, but refreshes only while someone asks:
// the first call after a quiet spell fetches, a refresher then keeps the
// answer fresh until nobody asked for statsIdle, so a VM nobody scrapes
// costs nothing. Every domain refresh (an event, a change a Sync applied)
// drops the answer: a paused, stopped or re-plugged domain shows at the
// next call, not up to 3.25 s later.
const (
	statsMaxAge       = 3250 * time.Millisecond // KubeVirt's cache period
	statsRefreshEvery = 3 * time.Second         // < statsMaxAge: hits stay hits
	statsIdle         = 2 * time.Minute         // the refresher stops after
	statsFetchTimeout = 10 * time.Second        // one background fetch
)

// statsCache is a cached answer of libvirt's stats: GetDomainStats' JSON,
// and the dirty rate (dirtyrate.go), which only uses get without a
// refresher and its own maximum age.
type statsCache[T any] struct {
	fetch func(context.Context) (T, error)
	// The periods, statsMaxAge, statsRefreshEvery and statsIdle outside
	// tests.
	maxAge, every, idle time.Duration

	mu       sync.Mutex
	data     T
	have     bool      // data holds an answer
	at       time.Time // when data was fetched
	gen      uint64    // bumped by drop: a fetch begun before is not kept
	asked    time.Time // the last get
	running  bool      // the refresher runs
	inflight chan struct{}
}

func newStatsCache[T any](fetch func(context.Context) (T, error)) *statsCache[T] {
	return &statsCache[T]{fetch: fetch, maxAge: statsMaxAge, every: statsRefreshEvery, idle: statsIdle}
}

// get answers from the cache when its answer is fresh, else fetches (one
// fetch at a time: concurrent callers share it). bg, when not nil, is the
// lifetime of a refresher get starts if none runs.
func (c *statsCache[T]) get(ctx, bg context.Context) (T, error) {
	c.mu.Lock()
	c.asked = time.Now()
	if bg != nil && !c.running {
		c.running = true
		go c.refresh(bg)
	}
	c.mu.Unlock()
	return c.load(ctx, false)
}

// load is get without the bookkeeping of who asked; with force it fetches
// even while the answer is fresh (the refresher: callers keep getting the
// fresh answer meanwhile).
func (c *statsCache[T]) load(ctx context.Context, force bool) (T, error) {
	for {
		c.mu.Lock()
		if !force && c.have && time.Since(c.at) < c.maxAge {
			data := c.data
			c.mu.Unlock()
			return data, nil
		}
		if wait := c.inflight; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				force = false // the fetch waited for is as new as ours would be
				continue      // its answer, or our turn to fetch
			case <-ctx.Done():
				var zero T
				return zero, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.inflight = done
		gen := c.gen
		c.mu.Unlock()

		data, err := c.fetch(ctx)
		c.mu.Lock()
		c.inflight = nil
		close(done)
		if err == nil && gen == c.gen {
			c.data, c.have, c.at = data, true, time.Now()
		}
		c.mu.Unlock()
		return data, err
	}
}

// refresh keeps the answer fresh until nobody asked for idle, or bg ends.
func (c *statsCache[T]) refresh(bg context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-bg.Done():
			c.stop()
			return
		case <-t.C:
		}
		c.mu.Lock()
		quiet := time.Since(c.asked) > c.idle
		if quiet {
			c.running = false
		}
		c.mu.Unlock()
		if quiet {
			return
		}
		ctx, cancel := context.WithTimeout(bg, statsFetchTimeout)
		c.load(ctx, true) // a failure is the next caller's to see
		cancel()
	}
}

func (c *statsCache[T]) stop() {
	c.mu.Lock()
	c.running = false
	c.mu.Unlock()
}

// drop forgets the answer, and any fetch under way will not be kept.
func (c *statsCache[T]) drop() {
	c.mu.Lock()
	c.gen++
	var zero T
	c.data, c.have = zero, false
	c.mu.Unlock()
}
