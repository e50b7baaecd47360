package domain

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/digitalocean/go-libvirt"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domain/bounded"
	"github.com/virtlauncher/virtlauncher/internal/domain/devices"
	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// lifecycle is the common part of the manager's lifecycle verbs: the
// operation lock, identity check and lookup around each (verb,
// verbLocked), the shutdown signal and the destroy.
type lifecycle struct {
	op   opLock
	rec  *record // the VMI's identity; the deletion timestamp
	find finder
	log  *slog.Logger
	// refresh re-reads the domain and sends it (watcher.refresh).
	refresh func(ctx context.Context, typ string, emit bool)
}

// Pause suspends a running domain; it stays paused until Unpause (Sync does
// not resume a domain the user paused).
func (m *Manager) Pause(ctx context.Context, v *v1.VirtualMachineInstance) error {
	return m.life.verb(ctx, v, verbPause, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		m.mu.Lock()
		m.run.userPaused = true
		m.mu.Unlock()
		if st == libvirt.DomainPaused {
			return nil
		}
		if st != libvirt.DomainRunning {
			return fmt.Errorf("domain %s is not running", d.Name)
		}
		return l.DomainSuspend(d)
	})
}

// Unpause resumes a paused domain.
func (m *Manager) Unpause(ctx context.Context, v *v1.VirtualMachineInstance) error {
	return m.life.verb(ctx, v, verbUnpause, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		m.mu.Lock()
		m.run.userPaused = false
		m.mu.Unlock()
		if st != libvirt.DomainPaused {
			return nil
		}
		if err := l.DomainResume(d); err != nil {
			return err
		}
		m.guest.SyncTime("after unpause")
		return nil
	})
}

// Shutdown asks the guest to power off (signalShutdown). The first one
// records the deletion timestamp in the metadata (kubevirt-wire.md 3.5).
func (m *Manager) Shutdown(ctx context.Context, v *v1.VirtualMachineInstance) error {
	return m.life.verb(ctx, v, verbShutdown, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		if !active(st) {
			return nil
		}
		m.life.markShutdownStart(ctx)
		return m.life.signalShutdown(ctx, l, d)
	})
}

// shutdownCallTimeout bounds the shutdown request to the daemon. With the
// guest agent connected libvirt asks the agent first and may wait up to
// 60 s for a hung one before it tries ACPI; signalShutdown presses the
// power button itself after this long instead, and the grace period's
// destroy (which needs no daemon job) still ends the guest on time.
const shutdownCallTimeout = 10 * time.Second

// acpiCallTimeout bounds pressing the power button (a QEMU monitor command).
const acpiCallTimeout = 5 * time.Second

// signalShutdown asks the guest to power off as KubeVirt's launcher does
// (VIR_DOMAIN_SHUTDOWN_DEFAULT): libvirt uses the guest agent when it is
// connected and falls back to the ACPI power button when the agent fails
// or is not there.
//
// A guest that powers off at once through its agent can be gone before
// libvirt's answer, which then says the domain is not running: that is
// the shutdown asked for, not a failure.
//
// An agent that does not answer (or whose shutdown hangs) keeps libvirt
// waiting long before its own fallback: after shutdownCallTimeout the
// power button is pressed directly (a separate daemon job, which the
// agent's does not hold up), as libvirt would have done in the end.
func (x *lifecycle) signalShutdown(ctx context.Context, l *libvirt.Libvirt, d libvirt.Domain) error {
	cctx, cancel := context.WithTimeout(ctx, shutdownCallTimeout)
	defer cancel()
	err := bounded.Call(cctx, "ask the guest to power off", func() error {
		return l.DomainShutdownFlags(d, 0)
	})
	switch {
	case err == nil:
		return nil
	case cctx.Err() != nil && ctx.Err() == nil:
		x.log.Warn("the guest agent did not carry out the shutdown in time: pressing the ACPI power button", "after", shutdownCallTimeout)
		actx, cancel := context.WithTimeout(ctx, acpiCallTimeout)
		defer cancel()
		err = bounded.Call(actx, "press the ACPI power button", func() error {
			return l.DomainShutdownFlags(d, libvirt.DomainShutdownAcpiPowerBtn)
		})
		if err == nil {
			return nil
		}
	case cctx.Err() != nil:
		return err
	}
	if st, _, serr := domainState(l, d); libvirt.IsNotFound(serr) || (serr == nil && !active(st)) {
		x.log.Info("the guest powered off while its shutdown was asked for", "reason", err.Error())
		return nil
	}
	return err
}

// markShutdownStart records when the graceful shutdown began (the start of
// the grace period virt-handler counts from), once, and tells the handler.
func (x *lifecycle) markShutdownStart(ctx context.Context) {
	x.rec.mu.Lock()
	first := x.rec.md.DeletionTimestamp == nil
	if first {
		now := time.Now().UTC()
		x.rec.md.DeletionTimestamp = &now
	}
	x.rec.mu.Unlock()
	if first {
		x.refresh(ctx, EventModified, true)
	}
}

// Kill destroys the domain (QEMU is terminated).
//
// A daemon that does not destroy the domain within killDaemonWait (hung,
// or still busy with an operation before this one) does not keep the
// guest alive: with Config.KillWithoutDaemon the launcher then kills QEMU
// by the pid it knows and replaces the daemon (whose death ends the calls
// waiting on it, and with them the operation lock they hold), and Kill
// reports the domain destroyed.
func (m *Manager) Kill(ctx context.Context, v *v1.VirtualMachineInstance) error {
	kill := func(ctx context.Context) error {
		return m.life.verb(ctx, v, verbKill, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
			if !active(st) {
				return nil
			}
			return m.life.destroy(l, d)
		})
	}
	if m.cfg.KillWithoutDaemon == nil {
		return kill(ctx)
	}
	if v != nil {
		// The fallback below acts without the operation lock, under which
		// verb checks the VMI: check it first.
		if err := m.checkIdentity(v, false); err != nil {
			return fmt.Errorf("%s: %w", verbKill, err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, killDaemonWait)
	defer cancel()
	err := kill(dctx)
	if err == nil || dctx.Err() == nil || ctx.Err() != nil {
		return err
	}
	m.log.Error("the libvirt daemon did not destroy the domain in time: killing QEMU by its pid and replacing the daemon", "reason", err.Error())
	if kerr := m.cfg.KillWithoutDaemon(ctx); kerr != nil {
		return fmt.Errorf("%w; killing QEMU: %w", err, kerr)
	}
	m.watch.qemuKilled()
	return nil
}

// killDaemonWait is how long Kill lets the daemon destroy the domain before
// it kills QEMU itself: well within virt-handler's 20 s for the call.
const killDaemonWait = 8 * time.Second

// destroy kills QEMU; an error that leaves the domain down anyway (a destroy
// racing with the daemon's own stop) is not an error.
func (x *lifecycle) destroy(l *libvirt.Libvirt, d libvirt.Domain) error {
	err := l.DomainDestroyFlags(d, 0)
	if err == nil {
		return nil
	}
	if st, _, serr := domainState(l, d); serr == nil && !active(st) {
		return nil
	}
	if libvirt.IsNotFound(err) {
		return nil
	}
	return err
}

// undefineFlags are KubeVirt's (DeleteVMI): keep the EFI variable store, so
// a persistent-EFI VMI finds its variables again on the backend-storage
// volume (and a new Sync in the same pod finds them too), and drop checkpoint
// metadata. No TPM flag: libvirt then keeps a TPM's state when it is
// persistent (persistent_state="yes") and removes it otherwise, which is
// what devices.tpm.persistent asks for.
const undefineFlags = libvirt.DomainUndefineKeepNvram | libvirt.DomainUndefineCheckpointsMetadata

// Delete undefines the domain. When it is (or becomes) inactive the manager
// sends the "gone" event.
func (m *Manager) Delete(ctx context.Context, v *v1.VirtualMachineInstance) error {
	return m.life.verb(ctx, v, verbDelete, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		err := l.DomainUndefineFlags(d, undefineFlags)
		if err != nil && libvirt.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// Reset is a hard reset of the guest.
func (m *Manager) Reset(ctx context.Context, v *v1.VirtualMachineInstance) error {
	return m.life.verb(ctx, v, verbReset, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		if !active(st) {
			return fmt.Errorf("domain %s is not running", d.Name)
		}
		return l.DomainReset(d, 0)
	})
}

// SoftReboot asks the guest to reboot: through its agent when it is
// connected, else with the ACPI power button, as KubeVirt does (which
// reads the agent's state from the VMI's AgentConnected condition, itself
// made from the Domain this reads).
func (m *Manager) SoftReboot(ctx context.Context, v *v1.VirtualMachineInstance) error {
	return m.life.verb(ctx, v, verbSoftReboot, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		if st != libvirt.DomainRunning {
			return fmt.Errorf("domain %s is not running", d.Name)
		}
		flags := libvirt.DomainRebootAcpiPowerBtn
		m.mu.Lock()
		if m.cache != nil && agentConnected(m.cache) {
			flags = libvirt.DomainRebootGuestAgent
		}
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, shutdownCallTimeout)
		defer cancel()
		return bounded.Call(ctx, "ask the guest to reboot", func() error { return l.DomainReboot(d, flags) })
	})
}

// verbKind is one lifecycle verb. What verb does depends on it
// (needsDomain); its String is only for messages.
type verbKind int

const (
	verbPause verbKind = iota
	verbUnpause
	verbShutdown
	verbKill
	verbDelete
	verbReset
	verbSoftReboot
)

var verbNames = [...]string{
	verbPause:      "pause",
	verbUnpause:    "unpause",
	verbShutdown:   "shut down",
	verbKill:       "kill",
	verbDelete:     "delete",
	verbReset:      "reset",
	verbSoftReboot: "soft reboot",
}

func (k verbKind) String() string { return verbNames[k] }

// needsDomain says whether the verb fails when no domain is defined: the
// ones that act on a running guest do; the ones that stop or remove it are
// already done (virt-handler calls Kill and Delete on domains that are
// already gone).
func (k verbKind) needsDomain() bool {
	switch k {
	case verbPause, verbUnpause, verbReset, verbSoftReboot:
		return true
	}
	return false
}

// verb runs one lifecycle operation under the operation lock. Without a
// domain it fails or succeeds as what.needsDomain says.
func (x *lifecycle) verb(ctx context.Context, v *v1.VirtualMachineInstance, what verbKind, f func(*libvirt.Libvirt, libvirt.Domain, libvirt.DomainState) error) error {
	if err := x.op.lock(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// go-libvirt's calls take no context: the operation runs in its own
	// goroutine, which keeps the lock until the daemon has answered (so
	// nothing after it overtakes it), while the caller waits only until
	// ctx ends.
	done := make(chan error, 1)
	go func() {
		defer x.op.unlock()
		done <- x.verbLocked(ctx, v, what, f)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s: the libvirt daemon did not answer: %w", what, ctx.Err())
	}
}

func (x *lifecycle) verbLocked(ctx context.Context, v *v1.VirtualMachineInstance, what verbKind, f func(*libvirt.Libvirt, libvirt.Domain, libvirt.DomainState) error) error {
	if v != nil {
		if err := x.rec.checkIdentity(v, false); err != nil {
			return err
		}
	}
	l, d, ok, err := x.find.lookup(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !ok {
		if what.needsDomain() {
			return fmt.Errorf("%s: no domain is defined", what)
		}
		return nil
	}
	st, _, err := domainState(l, d)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := f(l, d, st); err != nil {
		return fmt.Errorf("%s domain %s: %w", what, d.Name, err)
	}
	return nil
}

// Domain returns the cached Domain JSON object (nil when no domain is
// defined). It never talks to libvirt, so it never waits behind a Sync.
func (m *Manager) Domain(ctx context.Context) (*domainjson.Domain, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cache, nil
}

// QemuVersion is the hypervisor version as KubeVirt's launcher words it
// (cli.LibvirtConnection.GetQemuVersion): "QEMU 7.2.22" for libvirt's
// 7002022.
func (m *Manager) QemuVersion(ctx context.Context) (string, error) {
	l, err := m.conn.wait(ctx)
	if err != nil {
		return "", err
	}
	v, err := devices.HypervisorVersion(ctx, l)
	if err != nil {
		return "", err
	}
	return devices.FormatQemuVersion(v), nil
}

// MarkGracefulShutdown records that the pod got SIGTERM
// (MarkedForGracefulShutdown in the metadata) and tells the handler.
func (m *Manager) MarkGracefulShutdown(ctx context.Context) {
	t := true
	m.mu.Lock()
	m.md.MarkedForGracefulShutdown = &t
	m.mu.Unlock()
	m.watch.refresh(ctx, EventModified, true)
}

// ShutdownForTermination is the launcher's own graceful stop on SIGTERM:
// signalShutdown, without the handler. It reports whether a running
// domain exists.
func (m *Manager) ShutdownForTermination(ctx context.Context) (bool, error) {
	running := false
	err := m.life.verb(ctx, nil, verbShutdown, func(l *libvirt.Libvirt, d libvirt.Domain, st libvirt.DomainState) error {
		if !active(st) {
			return nil
		}
		running = true
		// The launcher's own power-off after SIGTERM starts the grace
		// period just as the handler's Shutdown does.
		m.life.markShutdownStart(ctx)
		return m.life.signalShutdown(ctx, l, d)
	})
	return running, err
}

// Destroy kills the domain without identity checks (grace period over).
func (m *Manager) Destroy(ctx context.Context) error { return m.Kill(ctx, nil) }

// Undefine removes the domain definition without identity checks (the
// launcher's own clean-up when no handler will call Delete).
func (m *Manager) Undefine(ctx context.Context) error { return m.Delete(ctx, nil) }
