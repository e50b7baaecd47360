package plan

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
)

// VifCache is what the privileged phase records for the unprivileged one,
// one file per pod interface (layout.VifCache). Field names and types are
// KubeVirt's DHCPConfig (vif-cache-<iface>.json), so a file written by
// virt-handler reads here and the other way round.
type VifCache struct {
	Name                string           // pod interface name
	IP                  netlink.Addr     // guest IPv4 address with prefix
	IPv6                netlink.Addr     // guest IPv6 address (masquerade, dual stack)
	MAC                 net.HardwareAddr // guest MAC
	AdvertisingIPAddr   net.IP           // DHCPv4 server address (gateway or bridge fake IP)
	AdvertisingIPv6Addr net.IP           // DHCPv6 server address
	Routes              *[]netlink.Route // bridge: the pod interface's IPv4 routes
	Mtu                 uint16
	IPAMDisabled        bool   // bridge without an IPv4 address: no DHCP
	Gateway             net.IP // IPv4 router for the guest
	Subdomain           string
}

// CachePath is the vif cache file of one pod interface.
func CachePath(dir, podIface string) string {
	return layout.Layout{PrivateDir: dir}.VifCache(podIface)
}

// ReadVifCache reads the cache of one pod interface from the private dir.
func ReadVifCache(dir, podIface string) (*VifCache, error) {
	b, err := os.ReadFile(CachePath(dir, podIface))
	if err != nil {
		return nil, fmt.Errorf("read vif cache of %s: %w", podIface, err)
	}
	var c VifCache
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse vif cache of %s: %w", podIface, err)
	}
	return &c, nil
}

// WriteVifCache writes atomically (rename) with mode 0644: the launcher may
// run as another user and must read it; nothing in it is secret. The
// privileged side writes it as root, so a link at the file's name is
// replaced, never written through, and a link in place of dir is refused.
func WriteVifCache(dir string, c *VifCache) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode vif cache of %s: %w", c.Name, err)
	}
	if err := safefs.WriteFile(CachePath(dir, c.Name), b, 0o644); err != nil {
		return fmt.Errorf("write vif cache of %s: %w", c.Name, err)
	}
	return nil
}

// RemoveVifCache removes the cache of one pod interface; a missing one is
// fine. Like WriteVifCache it goes through a descriptor of dir, which must
// not be a link: the privileged side removes it as root, in a directory
// the launcher's user may own.
func RemoveVifCache(dir, podIface string) error {
	d, err := safefs.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove vif cache of %s: %w", podIface, err)
	}
	defer d.Close()
	if err := d.Remove(filepath.Base(CachePath(dir, podIface))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove vif cache of %s: %w", podIface, err)
	}
	return nil
}
