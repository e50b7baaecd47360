package domain

import (
	"context"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
)

// WarmCapabilities asks the daemon for the domain capabilities of arch
// (libvirt spelling: x86_64) and virtType (kvm or qemu), which makes it
// probe that QEMU binary now, while nothing else runs, instead of in the
// first Sync's define: with a cold capability cache that probe is about
// 0.4 s here, with a warm one a few milliseconds. A define arriving during
// the probe waits for it inside libvirt (the capability cache is locked
// per binary), so the probe never runs twice. Errors only cost the head
// start.
func (m *Manager) WarmCapabilities(ctx context.Context, arch, virtType string) error {
	l, err := m.conn.wait(ctx)
	if err != nil {
		return err
	}
	if _, err := l.ConnectGetDomainCapabilities(nil, libvirt.OptString{arch}, nil, libvirt.OptString{virtType}, 0); err != nil {
		return fmt.Errorf("domain capabilities of %s/%s: %w", arch, virtType, err)
	}
	return nil
}

// warmHostCapabilities makes the daemon build its host capabilities now,
// in the background, rather than in the first GetDomainStats or
// GetQemuVersion. libvirt builds them on first use (the stats' cpu group
// asks for them for its cache-monitor figures, virConnectGetVersion for
// the default emulator), and building them probes every qemu-system-*
// binary on the PATH that the capability cache lacks: on Debian that is
// qemu-system-i386 besides the x86_64 one the domain uses, ~0.5 s of QEMU
// probing under TCG (KubeVirt's image has one QEMU binary). It runs once a
// domain runs: the daemon probes one binary at a time, so earlier it would
// hold up the first Sync's define and start (WarmCapabilities, at launcher
// start, probes only the binary the domain uses, for that define). It runs
// once per connection, since a restarted daemon builds them anew (from the
// capability cache, which by then holds both binaries).
func (m *Manager) warmHostCapabilities(ctx context.Context, l *libvirt.Libvirt) {
	m.mu.Lock()
	if m.capsWarmed == l {
		m.mu.Unlock()
		return
	}
	m.capsWarmed = l
	m.mu.Unlock()
	go func() {
		// ctx may be a call's (a Sync's refresh): the warm-up outlives it.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), capsWarmTimeout)
		defer cancel()
		t0 := time.Now()
		err := bounded.Call(wctx, "warm the daemon's capabilities", func() error {
			_, err := l.ConnectGetVersion()
			return err
		})
		if err != nil {
			m.log.Debug("warm the daemon's capabilities", "reason", err.Error())
			return
		}
		m.log.Debug("daemon capabilities ready", "took", time.Since(t0).String())
	}()
}

// capsWarmTimeout bounds the capability warm-up: a cold probe of a QEMU
// binary takes ~0.5 s here, several seconds on a loaded node.
const capsWarmTimeout = 30 * time.Second
