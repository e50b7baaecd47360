package standalone

import (
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/domainjson"
)

func TestGuestReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *domainjson.Domain
		want string
	}{
		{"no domain", nil, ""},
		{"no agent data", &domainjson.Domain{}, ""},
		{"OS and two interfaces", &domainjson.Domain{Status: domainjson.DomainStatus{
			OSInfo: domainjson.GuestOSInfo{Name: "Debian GNU/Linux", PrettyName: "Debian GNU/Linux 12 (bookworm)"},
			Interfaces: []domainjson.InterfaceStatus{
				{InterfaceName: "eth0", Mac: "02:00:00:00:00:01", Ip: "10.0.2.2", IPs: []string{"10.0.2.2", "fd10:0:2::2"}},
				{InterfaceName: "eth1", Mac: "02:00:00:00:00:02", Ip: "192.168.67.2"},
				{InterfaceName: "eth2", Mac: "02:00:00:00:00:03"}, // no address yet: left out
			},
		}}, "Debian GNU/Linux 12 (bookworm); eth0 10.0.2.2 fd10:0:2::2; eth1 192.168.67.2"},
		{"interface without a guest name: its MAC", &domainjson.Domain{Status: domainjson.DomainStatus{
			OSInfo:     domainjson.GuestOSInfo{Name: "Fedora"},
			Interfaces: []domainjson.InterfaceStatus{{Mac: "02:00:00:00:00:01", IPs: []string{"10.0.2.2"}}},
		}}, "Fedora; 02:00:00:00:00:01 10.0.2.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := guestReport(tc.d); got != tc.want {
				t.Errorf("guestReport = %q, want %q", got, tc.want)
			}
		})
	}
}
