package reliability

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
)

// TestScreenshotsNeverWedge: screenshots taken one after another, as a
// VNC preview or virt-handler's screenshot endpoint takes them, with a
// lifecycle call after each. A screenshot's libvirt stream whose packets
// come in an order the client library does not expect must never stall the
// launcher's connection to its daemon: every Pause and Unpause after it
// answers within its deadline, and SIGTERM ends the pod within its grace
// period plus a fixed margin.
func TestScreenshotsNeverWedge(t *testing.T) {
	t.Parallel()
	const grace = 3
	p := newPod(t, "shots", podOpts{grace: grace})
	p.WaitReady(60 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := p.Client(ctx)
	p.boot(ctx, c)
	v := p.vmi()

	rounds := 40
	if soak() {
		rounds = 400
	}
	var shots, failed int
	for i := 0; i < rounds; i++ {
		mime, data, err := c.Screenshot(ctx, v)
		switch {
		case err != nil:
			failed++
			t.Logf("round %d: %v", i, err)
		case !strings.HasPrefix(string(data), "\x89PNG\r\n\x1a\n") && !strings.HasPrefix(string(data), "P6\n"):
			t.Errorf("round %d: screenshot %q, %d bytes starting %q", i, mime, len(data), data[:min(len(data), 16)])
		default:
			shots++
		}
		for _, op := range []struct {
			name string
			f    func(context.Context) error
		}{
			{"Pause", func(ctx context.Context) error { return c.Pause(ctx, v) }},
			{"Unpause", func(ctx context.Context) error { return c.Unpause(ctx, v) }},
		} {
			octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
			err := op.f(octx)
			ocancel()
			if err != nil {
				t.Fatalf("round %d: %s after a screenshot: %v\n%s", i, op.name, err, launchertest.Tail(p.Stderr.String(), 4000))
			}
		}
	}
	t.Logf("%d screenshots, %d refused, in %d rounds", shots, failed, rounds)
	if failed > rounds/10 {
		t.Errorf("%d of %d screenshots failed", failed, rounds)
	}

	t0 := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.ExitCode(2 * time.Minute)
	took := time.Since(t0)
	t.Logf("SIGTERM: exit %d after %v", code, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if limit := grace*time.Second + 30*time.Second; took > limit {
		t.Errorf("the pod took %v to end, more than %v", took, limit)
	}
	p.assertNothingLeft()
}
