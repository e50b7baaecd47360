package netsetup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// BridgeMAC is the masquerade bridge's fixed MAC (KubeVirt's).
var BridgeMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0}

// PrivilegedConfig configures the privileged phase.
type PrivilegedConfig struct {
	// QemuUID and QemuGID own the taps, so an unprivileged QEMU can open them.
	QemuUID, QemuGID int
	// CacheDir is the launcher's private dir (layout.Layout.PrivateDir):
	// vif-cache-<podIface>.json goes there, and the restore state too
	// unless StateDir is set.
	CacheDir string
	// StateDir is where the bridge binding's restore state goes
	// (netsetup-state-<podIface>.json). Teardown reads it back as root and
	// restores the pod interface from it, so it belongs in a directory the
	// launcher's user cannot write (vlctl run keeps it in its root-owned
	// work dir). Empty: CacheDir.
	StateDir string
	Plan     plan.PlanOptions
}

// undo collects the reversal of every change one call made, so a failure
// leaves nothing half made.
type undo []func() error

func (u *undo) push(f func() error) { *u = append(*u, f) }

func (u undo) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		if err := u[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetupPrivileged wires every masquerade/bridge/passt interface of the VMI inside
// the pod network namespace podNS (0: the current one). It is idempotent:
// a second run finds everything in place and changes nothing. On error
// every link, address, rule and file this call created is removed again.
func SetupPrivileged(ctx context.Context, podNS netns.NsHandle, vmi *v1.VirtualMachineInstance, cfg PrivilegedConfig, log *slog.Logger) error {
	ifaces, err := plan.PlanFor(vmi, cfg.Plan)
	if err != nil {
		return err
	}
	if cfg.CacheDir == "" {
		return fmt.Errorf("privileged network setup: cache dir not set")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return plan.InNS(podNS, func() error {
		var u undo
		for _, it := range ifaces {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, u.run())
			}
			var err error
			switch it.Binding {
			case plan.BindingMasquerade:
				err = setupMasquerade(it, cfg, &u)
			case plan.BindingBridge:
				err = setupBridge(it, cfg, &u)
			case plan.BindingPasst:
				err = setupPasst(cfg)
			case plan.BindingPluginTap:
				// The plugin's CNI (managedTap: virt-handler) makes its tap.
				continue
			}
			if err != nil {
				if uerr := u.run(); uerr != nil {
					err = fmt.Errorf("%w (rollback: %v)", err, uerr)
				}
				return fmt.Errorf("interface %s (%s binding): %w", it.Name, it.Binding, err)
			}
			log.Info("pod interface wired", "iface", it.Name, "binding", it.Binding,
				"podIface", it.PodIface, "bridge", it.Bridge, "tap", it.Tap)
		}
		return nil
	})
}

// TeardownPrivileged removes every link, address, nftables table and cache
// file SetupPrivileged made for the VMI and gives a bridged pod interface
// back its name, MAC, addresses and routes. Missing pieces are fine, so it
// can run after a partial setup or twice.
func TeardownPrivileged(ctx context.Context, podNS netns.NsHandle, vmi *v1.VirtualMachineInstance, cfg PrivilegedConfig, log *slog.Logger) error {
	ifaces, err := plan.PlanFor(vmi, cfg.Plan)
	if err != nil {
		return err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return plan.InNS(podNS, func() error {
		var errs []error
		masq := false
		for _, it := range ifaces {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := teardownIface(it, cfg); err != nil {
				errs = append(errs, fmt.Errorf("interface %s: %w", it.Name, err))
			}
			masq = masq || it.Binding == plan.BindingMasquerade
		}
		if masq {
			for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
				if err := deleteNAT(0, fam); err != nil {
					errs = append(errs, err)
				}
			}
		}
		log.Info("pod network torn down", "interfaces", len(ifaces), "errors", len(errs))
		return errors.Join(errs...)
	})
}

// TeardownInterface is TeardownPrivileged for one interface of the VMI,
// the one named name (an unplugged interface; vmi is the VMI from before
// the unplug, where its state is not absent yet). Missing pieces are fine.
func TeardownInterface(ctx context.Context, podNS netns.NsHandle, vmi *v1.VirtualMachineInstance, name string, cfg PrivilegedConfig) error {
	ifaces, err := plan.PlanFor(vmi, cfg.Plan)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ifaces, func(it plan.Iface) bool { return it.Name == name })
	if i < 0 {
		return fmt.Errorf("interface %s: not a masquerade or bridge interface of the VMI", name)
	}
	if ifaces[i].Binding != plan.BindingBridge {
		// Masquerade shares the pod's NAT tables with the pod network's
		// interface; only the pod network has it.
		return fmt.Errorf("interface %s: only a bridge interface can be torn down alone", name)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return plan.InNS(podNS, func() error {
		if err := teardownIface(ifaces[i], cfg); err != nil {
			return fmt.Errorf("interface %s: %w", name, err)
		}
		return nil
	})
}

func teardownIface(it plan.Iface, cfg PrivilegedConfig) error {
	if it.Binding == plan.BindingPasst || it.Binding == plan.BindingPluginTap {
		return nil // nothing of the interface's own was made (setupPasst)
	}
	var errs []error
	if err := delLink(it.Tap, "tuntap"); err != nil {
		errs = append(errs, err)
	}
	if err := delLink(it.Bridge, "bridge"); err != nil {
		errs = append(errs, err)
	}
	if it.Binding == plan.BindingBridge {
		var st bridgeState
		// Never through a link, and never blocking on a FIFO: what is read
		// here is acted on as root.
		b, err := safefs.ReadFile(statePath(cfg, it.PodIface))
		switch {
		case errors.Is(err, os.ErrNotExist):
			// never bridged (or already restored)
		case err != nil:
			errs = append(errs, err)
		default:
			if err := json.Unmarshal(b, &st); err != nil {
				errs = append(errs, fmt.Errorf("parse %s: %w", statePath(cfg, it.PodIface), err))
			} else if err := restorePodNIC(it, st); err != nil {
				errs = append(errs, err)
			} else if err := os.Remove(statePath(cfg, it.PodIface)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := plan.RemoveVifCache(cfg.CacheDir, it.PodIface); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
