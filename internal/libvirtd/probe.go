package libvirtd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// probeCallTimeout bounds the call that makes the daemon probe QEMU: about
// 2.5 s under TCG here, far more on a loaded machine.
const probeCallTimeout = 2 * time.Minute

// Probe starts a daemon with cfg, has it probe the host's QEMU (a
// domain-capabilities query, which fills the capability cache for the
// default emulator), stops it and returns the cache files it wrote
// (CapabilitiesCacheDir/*.xml). The daemon runs no guest: what it caches
// comes from libvirt and QEMU alone, which is why a cache made this way can
// be trusted by launchers of other users (see internal/capscache).
func Probe(ctx context.Context, cfg Config, log *slog.Logger) ([]string, error) {
	cfg.CapsSeedDir = ""
	d, err := Start(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	callErr := d.probe(ctx)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		return nil, fmt.Errorf("stop the probing daemon: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(cfg.CapabilitiesCacheDir(), "*.xml"))
	if err == nil && len(files) == 0 {
		err = errors.New("the daemon wrote no capability file")
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("probe QEMU's capabilities: %w", err), callErr)
	}
	// A domain-capabilities answer is not needed, only the probe behind it:
	// a host whose default virt type the emulator lacks still probed.
	if callErr != nil {
		log.Debug("domain capabilities", "reason", callErr.Error())
	}
	return files, nil
}

// probe asks the daemon for the default emulator's domain capabilities,
// within probeCallTimeout and ctx: go-libvirt's calls take no context, so a
// daemon that does not answer is left to Stop, which kills it.
func (d *Daemon) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeCallTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l := libvirt.NewWithDialer(SocketDialer(d.Socket()))
		if err := l.ConnectToURI(libvirt.ConnectURI(d.URI())); err != nil {
			done <- fmt.Errorf("connect %s: %w", d.Socket(), err)
			return
		}
		_, err := l.ConnectGetDomainCapabilities(nil, nil, nil, nil, 0)
		l.Disconnect()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("domain capabilities: %w", ctx.Err())
	}
}

// SocketDialer dials a daemon's unix socket (go-libvirt's socket.Dialer).
// go-libvirt's own dialers.NewLocal does the same, but its package also
// holds the TLS and SSH dialers, which would link golang.org/x/crypto/ssh
// and crypto/tls into the launcher: megabytes of binary for a local socket.
type SocketDialer string

// Dial implements go-libvirt's socket.Dialer.
func (s SocketDialer) Dial() (net.Conn, error) {
	return net.DialTimeout("unix", string(s), 2*time.Second)
}
