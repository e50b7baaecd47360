package dvimport

import (
	"fmt"
	"io"
	"time"
)

// progress tells how a download goes: on a terminal one line rewritten in
// place a few times a second (bytes, rate, time left), elsewhere a plain
// line every logEvery.
type progress struct {
	w        io.Writer
	terminal bool
	what     string
	total    int64 // -1: unknown
	done     int64
	start    time.Time
	last     time.Time
	drawn    bool
	now      func() time.Time
}

const (
	drawEvery = 250 * time.Millisecond
	logEvery  = 10 * time.Second
)

func newProgress(w io.Writer, terminal bool, what string, total int64) *progress {
	p := &progress{w: w, terminal: terminal, what: what, total: total, now: time.Now}
	p.start = p.now()
	p.last = p.start
	if w != nil && !terminal {
		fmt.Fprintf(w, "vlctl: %s: downloading %s\n", what, byteText(total))
	}
	return p
}

// add counts n more bytes.
func (p *progress) add(n int64) {
	p.done += n
	if p.w == nil {
		return
	}
	every := logEvery
	if p.terminal {
		every = drawEvery
	}
	if now := p.now(); now.Sub(p.last) >= every {
		p.last = now
		p.show(now)
	}
}

// restart: the transfer starts over from byte 0.
func (p *progress) restart() {
	p.done = 0
	p.start = p.now()
}

func (p *progress) show(now time.Time) {
	if p.terminal {
		fmt.Fprintf(p.w, "\r\033[Kvlctl: %s", p.line(now))
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "vlctl: %s\n", p.line(now))
}

// line is "WHAT: DONE of TOTAL (P %), RATE/s, ETA left".
func (p *progress) line(now time.Time) string {
	s := fmt.Sprintf("%s: %s", p.what, byteText(p.done))
	if p.total > 0 {
		s += fmt.Sprintf(" of %s (%d %%)", byteText(p.total), p.done*100/p.total)
	}
	secs := now.Sub(p.start).Seconds()
	if secs <= 0 {
		return s
	}
	rate := float64(p.done) / secs
	s += fmt.Sprintf(", %s/s", byteText(int64(rate)))
	if p.total > 0 && rate > 0 {
		left := time.Duration(float64(p.total-p.done)/rate) * time.Second
		s += fmt.Sprintf(", %s left", left.Round(time.Second))
	}
	return s
}

// end finishes the line.
func (p *progress) end() {
	if p.w == nil {
		return
	}
	now := p.now()
	if p.terminal {
		if p.drawn {
			fmt.Fprintf(p.w, "\r\033[Kvlctl: %s\n", p.line(now))
		}
		return
	}
	fmt.Fprintf(p.w, "vlctl: %s, in %s\n", p.line(now), now.Sub(p.start).Round(100*time.Millisecond))
}

// byteText is n in binary units.
func byteText(n int64) string {
	if n < 0 {
		return "(length unknown)"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
