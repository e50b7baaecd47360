package relay

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// The pace of retries after a server socket's error, as net/http's Server
// has it: the first after 5 ms, each next one after twice as long, at most
// 1 s apart, and back to 5 ms after a success.
const (
	firstRetry = 5 * time.Millisecond
	maxRetry   = time.Second
)

// Backoff paces a server loop that retries after errors (AcceptLoop, and
// the read loop of a packet socket). The zero value is ready.
type Backoff struct{ next time.Duration }

// Retry says whether a loop that got err goes on: false when err means
// the socket was closed (the one way such a loop ends); otherwise it
// waits for the next retry and says how long it waited. The errors that
// come here are those of a machine out of something for a while (EMFILE,
// ENFILE, ENOBUFS, ENOMEM), a peer gone before it was accepted
// (ECONNABORTED) or a timeout: none is a reason to stop serving.
func (b *Backoff) Retry(err error) (time.Duration, bool) {
	if errors.Is(err, net.ErrClosed) {
		return 0, false
	}
	if b.next == 0 {
		b.next = firstRetry
	} else if b.next *= 2; b.next > maxRetry {
		b.next = maxRetry
	}
	time.Sleep(b.next)
	return b.next, true
}

// Reset starts the pace again after a success.
func (b *Backoff) Reset() { b.next = 0 }

// AcceptLoop hands every connection l accepts to handle (which returns at
// once, or serves the connection itself when one at a time is meant),
// until l is closed. Any other accept error is reported (report may be
// called often: rate-limit it, e.g. with a Reporter) and retried with
// Backoff.
func AcceptLoop(l net.Listener, report func(error), handle func(net.Conn)) {
	var b Backoff
	for {
		c, err := l.Accept()
		if err != nil {
			wait, ok := b.Retry(err)
			if !ok {
				return
			}
			report(fmt.Errorf("accept: %w (retried after %v)", err, wait))
			continue
		}
		b.Reset()
		handle(c)
	}
}

// How many reports a Reporter lets through: ReportBurst per ReportPeriod.
const (
	ReportBurst  = 10
	ReportPeriod = 10 * time.Second
)

// Reporter rate-limits what others can make a server say: each of its
// lines (a refused or failed connection, an accept error) may come from
// a peer at the rate it likes, and the log must not follow. The zero
// value is ready; it is safe for concurrent use.
type Reporter struct {
	mu      sync.Mutex
	start   time.Time // of the current period
	n       int       // reports let through in it
	dropped int       // reports left out since the last one let through
}

// Allow says whether a report may go out now and, when it may, how many
// were left out before it.
func (r *Reporter) Allow() (dropped int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.start) >= ReportPeriod {
		r.start, r.n = now, 0
	}
	if r.n >= ReportBurst {
		r.dropped++
		return 0, false
	}
	r.n++
	dropped, r.dropped = r.dropped, 0
	return dropped, true
}

// Printf prints through printf if Allow lets it, saying how many reports
// were left out before it.
func (r *Reporter) Printf(printf func(format string, a ...any), format string, a ...any) {
	dropped, ok := r.Allow()
	if !ok {
		return
	}
	if dropped > 0 {
		nl := strings.HasSuffix(format, "\n")
		format = strings.TrimSuffix(format, "\n") + fmt.Sprintf(" (and %d more reports left out)", dropped)
		if nl {
			format += "\n"
		}
	}
	printf(format, a...)
}
