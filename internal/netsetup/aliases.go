package netsetup

import (
	"context"
	"log/slog"

	"github.com/vishvananda/netns"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/facts"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/dhcp"
	"github.com/virtlauncher/virtlauncher/internal/netsetup/plan"
)

// The plan, the vif cache and the unprivileged phase under the names this
// package has always given them (see the package comment).

// Bindings this package implements.
const (
	BindingMasquerade = plan.BindingMasquerade
	BindingBridge     = plan.BindingBridge
)

// InfiniteLease is the lease KubeVirt hands out.
const InfiniteLease = dhcp.InfiniteLease

// Default VM subnets of the masquerade binding (KubeVirt's defaults).
var (
	DefaultVMNetwork4 = plan.DefaultVMNetwork4
	DefaultVMNetwork6 = plan.DefaultVMNetwork6
)

type (
	// Iface is plan.Iface.
	Iface = plan.Iface
	// Port is plan.Port.
	Port = plan.Port
	// PlanOptions is plan.PlanOptions.
	PlanOptions = plan.PlanOptions
	// VifCache is plan.VifCache.
	VifCache = plan.VifCache
	// DHCPConfig is dhcp.Config.
	DHCPConfig = dhcp.Config
	// DNSConfig is dhcp.DNSConfig.
	DNSConfig = dhcp.DNSConfig
	// Lease4 is dhcp.Lease4.
	Lease4 = dhcp.Lease4
	// Lease6 is dhcp.Lease6.
	Lease6 = dhcp.Lease6
)

// PlanFor is plan.PlanFor.
func PlanFor(vmi *v1.VirtualMachineInstance, opts PlanOptions) ([]Iface, error) {
	return plan.PlanFor(vmi, opts)
}

// HashedPodIfaceName is plan.HashedPodIfaceName.
func HashedPodIfaceName(network string) string { return plan.HashedPodIfaceName(network) }

// TapName is plan.TapName.
func TapName(podIface string) string { return plan.TapName(podIface) }

// BridgeName is plan.BridgeName.
func BridgeName(podIface string) string { return plan.BridgeName(podIface) }

// NICName is plan.NICName.
func NICName(podIface string) string { return plan.NICName(podIface) }

// InNS is plan.InNS.
func InNS(ns netns.NsHandle, fn func() error) error { return plan.InNS(ns, fn) }

// ReadVifCache is plan.ReadVifCache.
func ReadVifCache(dir, podIface string) (*VifCache, error) { return plan.ReadVifCache(dir, podIface) }

// ParseResolvConf is dhcp.ParseResolvConf.
func ParseResolvConf(b []byte) DNSConfig { return dhcp.ParseResolvConf(b) }

// GuestHostname is dhcp.GuestHostname.
func GuestHostname(vmi *v1.VirtualMachineInstance) string { return dhcp.GuestHostname(vmi) }

// StartDHCP is dhcp.Start: the unprivileged phase.
func StartDHCP(ctx context.Context, vmi *v1.VirtualMachineInstance, cfg DHCPConfig, log *slog.Logger) (map[string]facts.Interface, func() error, error) {
	return dhcp.Start(ctx, vmi, cfg, log)
}
