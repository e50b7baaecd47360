package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// console reads the serial console and stamps the first line and the
// guest's markers.
type console struct {
	sock string

	mu        sync.Mutex
	firstLine time.Time
	markers   map[string]time.Time
	buf       strings.Builder
	changed   chan struct{}
}

func newConsole(sock string) *console {
	return &console{sock: sock, markers: map[string]time.Time{}, changed: make(chan struct{})}
}

func (c *console) run(ctx context.Context, exited <-chan struct{}) {
	var conn net.Conn
	for conn == nil {
		if cn, err := net.Dial("unix", c.sock); err == nil {
			conn = cn
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-exited:
			return
		case <-time.After(time.Millisecond):
		}
	}
	defer conn.Close()
	go func() {
		select {
		case <-ctx.Done():
		case <-exited:
		}
		conn.Close()
	}()
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		now := time.Now()
		if line != "" {
			c.mu.Lock()
			c.buf.WriteString(line)
			if strings.HasSuffix(line, "\n") && c.firstLine.IsZero() && strings.TrimSpace(line) != "" {
				c.firstLine = now
			}
			for _, m := range []string{testguest.MarkerBooted, testguest.MarkerReady, testguest.MarkerPowerButton, testguest.MarkerPowerOff} {
				if _, ok := c.markers[m]; !ok && strings.Contains(line, m) {
					c.markers[m] = now
				}
			}
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// wait waits for marker (or the first line when marker is "").
func (c *console) wait(ctx context.Context, marker string) (time.Time, error) {
	for {
		c.mu.Lock()
		t, ok := c.markers[marker]
		if marker == "" {
			t, ok = c.firstLine, !c.firstLine.IsZero()
		}
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return t, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("console: waiting for %q: %w (console so far: %q)", marker, ctx.Err(), c.tail())
		}
	}
}

func (c *console) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.buf.String()
	if len(s) > 300 {
		s = s[len(s)-300:]
	}
	return s
}
