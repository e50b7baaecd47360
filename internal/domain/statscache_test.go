package domain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeStats counts fetches; each answers with its number, after delay.
type fakeStats struct {
	n     atomic.Int32
	delay time.Duration
	fail  atomic.Bool
}

func (f *fakeStats) fetch(ctx context.Context) ([]byte, error) {
	n := f.n.Add(1)
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.fail.Load() {
		return nil, errors.New("no stats")
	}
	return fmt.Appendf(nil, "%d", n), nil
}

func testCache(f *fakeStats, maxAge, every, idle time.Duration) *statsCache[[]byte] {
	c := newStatsCache(f.fetch)
	c.maxAge, c.every, c.idle = maxAge, every, idle
	return c
}

func mustGet(t *testing.T, c *statsCache[[]byte], bg context.Context) string {
	t.Helper()
	b, err := c.get(context.Background(), bg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStatsCacheFreshAndDrop: a fresh answer is served again, an old one
// or a dropped one is fetched anew, and a failure is not kept.
func TestStatsCacheFreshAndDrop(t *testing.T) {
	f := &fakeStats{}
	c := testCache(f, 100*time.Millisecond, time.Hour, time.Hour)
	if a, b := mustGet(t, c, nil), mustGet(t, c, nil); a != "1" || b != "1" {
		t.Errorf("two calls within the age bound answered %s, %s; want the first fetch twice", a, b)
	}
	c.drop()
	if got := mustGet(t, c, nil); got != "2" {
		t.Errorf("after drop: %s, want a new fetch (2)", got)
	}
	time.Sleep(150 * time.Millisecond)
	if got := mustGet(t, c, nil); got != "3" {
		t.Errorf("after the age bound: %s, want a new fetch (3)", got)
	}
	c.drop()
	f.fail.Store(true)
	if _, err := c.get(context.Background(), nil); err == nil {
		t.Errorf("a failing fetch answered no error")
	}
	f.fail.Store(false)
	if got := mustGet(t, c, nil); got != "5" {
		t.Errorf("after a failure: %s, want a new fetch (5), the failure not kept", got)
	}
}

// TestStatsCacheShared: callers that come while a fetch runs share it; a
// drop while it runs keeps its answer out of the cache.
func TestStatsCacheShared(t *testing.T) {
	f := &fakeStats{delay: 100 * time.Millisecond}
	c := testCache(f, time.Hour, time.Hour, time.Hour)
	var wg sync.WaitGroup
	got := make([]string, 5)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := c.get(context.Background(), nil)
			got[i] = string(b)
		}()
	}
	wg.Wait()
	if n := f.n.Load(); n != 1 {
		t.Errorf("5 concurrent calls made %d fetches, want 1 (answers %v)", n, got)
	}
	for _, g := range got {
		if g != "1" {
			t.Errorf("answers %v, want all from the one fetch", got)
			break
		}
	}
	c.drop()
	done := make(chan string)
	go func() { b, _ := c.get(context.Background(), nil); done <- string(b) }()
	time.Sleep(30 * time.Millisecond) // the fetch is under way
	c.drop()
	if g := <-done; g != "2" {
		t.Errorf("the call under way answered %s, want its own fetch (2)", g)
	}
	if g := mustGet(t, c, nil); g != "3" {
		t.Errorf("after a drop during a fetch: %s, want a new fetch (3), not the dropped one", g)
	}
}

// TestStatsCacheRefresher: while someone asks, the refresher keeps the
// answer fresh (calls are served without waiting for a fetch); once nobody
// asked for the idle time it stops; a cancelled lifetime stops it too.
func TestStatsCacheRefresher(t *testing.T) {
	f := &fakeStats{delay: 5 * time.Millisecond}
	c := testCache(f, 60*time.Millisecond, 40*time.Millisecond, 200*time.Millisecond)
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 6 {
		mustGet(t, c, bg)
		time.Sleep(50 * time.Millisecond)
	}
	asking := f.n.Load()
	if asking < 3 {
		t.Errorf("%d fetches in 300 ms of calls with a refresh every 40 ms, want the refresher's", asking)
	}
	time.Sleep(400 * time.Millisecond) // past idle: it stops
	stopped := f.n.Load()
	time.Sleep(200 * time.Millisecond)
	if n := f.n.Load(); n != stopped {
		t.Errorf("fetches went on after nobody asked: %d, then %d", stopped, n)
	}
	c.mu.Lock()
	running := c.running
	c.mu.Unlock()
	if running {
		t.Errorf("the refresher says it runs after the idle time")
	}
	mustGet(t, c, bg) // starts it again
	cancel()
	time.Sleep(100 * time.Millisecond)
	c.mu.Lock()
	running = c.running
	c.mu.Unlock()
	if running {
		t.Errorf("the refresher runs after its lifetime ended")
	}
}
