package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

// The replies of qemu-guest-agent's commands, as QEMU's qga/qapi-schema.json
// defines them. libvirt hands a command's whole reply back as text:
// {"return": <value>}. Only the members KubeVirt reads are decoded.

// Info is guest-info's reply: the agent's version and its commands
// (virt-handler checks the commands it needs against this list and reports
// AgentVersionNotSupported when one is missing or disabled).
type Info struct {
	Version           string                     `json:"version"`
	SupportedCommands []v1.GuestAgentCommandInfo `json:"supported_commands,omitempty"`
}

// Load is guest-get-load's reply: the guest's load averages (the agent
// has the command from QEMU 10.0; Debian 12's, QEMU 7.2, has not).
type Load struct {
	Load1m  float64 `json:"load1m"`
	Load5m  float64 `json:"load5m"`
	Load15m float64 `json:"load15m"`
}

// OSInfo is guest-get-osinfo's reply.
type OSInfo struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	PrettyName    string `json:"pretty-name"`
	Version       string `json:"version"`
	VersionID     string `json:"version-id"`
	KernelRelease string `json:"kernel-release"`
	KernelVersion string `json:"kernel-version"`
	Machine       string `json:"machine"`
}

// Timezone is guest-get-timezone's reply; the zone name is optional.
type Timezone struct {
	Zone   string `json:"zone"`
	Offset int    `json:"offset"`
}

// User is one entry of guest-get-users' reply. LoginTime is seconds since
// the epoch, with a fraction.
type User struct {
	User      string  `json:"user"`
	Domain    string  `json:"domain"`
	LoginTime float64 `json:"login-time"`
}

// Filesystem is one entry of guest-get-fsinfo's reply.
type Filesystem struct {
	Name       string   `json:"name"`
	Mountpoint string   `json:"mountpoint"`
	Type       string   `json:"type"`
	UsedBytes  int      `json:"used-bytes,omitempty"`
	TotalBytes int      `json:"total-bytes,omitempty"`
	Disk       []FSDisk `json:"disk,omitempty"`
}

// FSDisk is a disk under a Filesystem.
type FSDisk struct {
	Serial  string `json:"serial,omitempty"`
	BusType string `json:"bus-type"`
}

// Interface is one entry of guest-network-get-interfaces' reply.
type Interface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address"`
	IPAddresses     []IPAddress `json:"ip-addresses"`
}

// IPAddress is an address of an Interface; Type is "ipv4" or "ipv6".
type IPAddress struct {
	Type    string `json:"ip-address-type"`
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// decodeReturn decodes the "return" member of a reply into v, strictly
// enough to tell an error reply or garbage from data.
func decodeReturn(command, reply string, v any) error {
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		return fmt.Errorf("%s: reply %.200q: %w", command, reply, err)
	}
	if r.Error != nil {
		return fmt.Errorf("%s: agent error %s: %s", command, r.Error.Class, r.Error.Desc)
	}
	if len(r.Return) == 0 {
		return fmt.Errorf("%s: reply %.200q has no \"return\"", command, reply)
	}
	if err := json.Unmarshal(r.Return, v); err != nil {
		return fmt.Errorf("%s: reply %.200q: %w", command, reply, err)
	}
	return nil
}

// FSFreezeStatus decodes guest-fsfreeze-status' reply: "frozen" or
// "thawed".
func FSFreezeStatus(reply string) (string, error) {
	var st string
	if err := decodeReturn(CmdFSFreezeState, reply, &st); err != nil {
		return "", err
	}
	if st == "" {
		return "", fmt.Errorf("%s: empty status in reply %.200q", CmdFSFreezeState, reply)
	}
	return st, nil
}

// guestInterfaces turns guest-network-get-interfaces' reply into the
// Domain's interface list as KubeVirt builds it (through libvirt's guest
// info, which does the same): the loopback is left out, an alias such as
// "eth0:1" adds its addresses to "eth0", the first IPv4 address (else the
// first address) is the primary one. The result is nil when the guest has
// no interface besides the loopback, as KubeVirt's is.
func guestInterfaces(ifaces []Interface) []domainjson.InterfaceStatus {
	var out []domainjson.InterfaceStatus
	index := map[string]int{}
	for _, in := range ifaces {
		name, _, _ := strings.Cut(in.Name, ":")
		if name == "lo" {
			continue
		}
		i, seen := index[name]
		if !seen {
			i = len(out)
			index[name] = i
			out = append(out, domainjson.InterfaceStatus{InterfaceName: name, Mac: in.HardwareAddress})
		}
		st := &out[i]
		for _, a := range in.IPAddresses {
			st.IPs = append(st.IPs, a.Address)
			if a.Type == "ipv4" && !isIPv4(st.Ip) {
				st.Ip = a.Address
			}
		}
		if st.Ip == "" && len(st.IPs) > 0 {
			st.Ip = st.IPs[0]
		}
	}
	return out
}

func isIPv4(s string) bool { return s != "" && !strings.Contains(s, ":") }

// loginSeconds is a login time as KubeVirt reports it: libvirt hands the
// agent's seconds over as whole milliseconds, which KubeVirt turns back
// into seconds.
func loginSeconds(t float64) float64 {
	if t <= 0 || t > 1e15 {
		return 0
	}
	return float64(int64(t*1000)) / 1000
}
