package launcher

import (
	"context"
	"errors"
	"os"

	"github.com/virtlauncher/virtlauncher/internal/hooks"
)

// errSignalled ends the start-up when a termination signal came while the
// launcher waited for its hook sidecars: there is nothing to shut down yet.
var errSignalled = errors.New("signal while waiting for the hook sidecars")

// collectHooks waits, as KubeVirt's launcher does before it starts
// libvirt, for the --hook-sidecars sidecars in --hooks-dir, up to
// --qemu-timeout. A signal ends the wait.
func (l *Launcher) collectHooks(ctx context.Context, sigs <-chan os.Signal) (*hooks.Manager, error) {
	n := l.opts.HookSidecars
	if n == 0 {
		return hooks.Collect(ctx, l.layout.HooksDir, 0, l.log)
	}
	l.log.Info("waiting for hook sidecars", "count", n, "dir", l.layout.HooksDir, "timeout", l.opts.QemuTimeout.String())
	ctx, cancel := context.WithTimeout(ctx, l.opts.QemuTimeout)
	defer cancel()
	type result struct {
		m   *hooks.Manager
		err error
	}
	done := make(chan result, 1)
	go func() {
		m, err := hooks.Collect(ctx, l.layout.HooksDir, n, l.log)
		done <- result{m, err}
	}()
	select {
	case r := <-done:
		return r.m, r.err
	case sig := <-sigs:
		cancel()
		if r := <-done; r.err == nil {
			r.m.Close()
		}
		l.log.Info("signal before the hook sidecars were collected, exiting", "signal", sig.String())
		return nil, errSignalled
	}
}

// shutdownHooks tells the sidecars QEMU is gone (v1alpha3 Shutdown).
func (l *Launcher) shutdownHooks() {
	if len(l.hooks.Sidecars()) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hooks.CallTimeout)
	defer cancel()
	if err := l.hooks.Shutdown(ctx); err != nil {
		l.log.Warn("hook sidecar Shutdown", "reason", err.Error())
	}
}
