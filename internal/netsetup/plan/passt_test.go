package plan

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"
)

func TestPasstForwards(t *testing.T) {
	istio := &v1.VirtualMachineInstance{}
	istio.Annotations = map[string]string{"sidecar.istio.io/inject": "True"}
	for _, tc := range []struct {
		name     string
		vmi      *v1.VirtualMachineInstance
		ports    []Port
		tcp, udp string
	}{
		{"none declared: all", &v1.VirtualMachineInstance{}, nil, "all", "all"},
		{"declared", &v1.VirtualMachineInstance{}, []Port{{"TCP", 80}, {"UDP", 53}, {"TCP", 443}}, "80,443", "53"},
		{"tcp only", &v1.VirtualMachineInstance{}, []Port{{"TCP", 22}}, "22", ""},
		{"istio, none declared: tcp but the proxy's", istio, nil,
			"~15000,~15001,~15004,~15006,~15008,~15009,~15020,~15021,~15053,~15090", ""},
		{"istio and a udp port", istio, []Port{{"UDP", 53}},
			"~15000,~15001,~15004,~15006,~15008,~15009,~15020,~15021,~15053,~15090", "53"},
	} {
		tcp, udp := PasstForwards(tc.vmi, tc.ports)
		if tcp != tc.tcp || udp != tc.udp {
			t.Errorf("%s: -t %q -u %q, want -t %q -u %q", tc.name, tcp, udp, tc.tcp, tc.udp)
		}
	}
	if got := PasstSocket("/var/run/kubevirt-private", "eth0"); got != "/var/run/kubevirt-private/passt-eth0.sock" {
		t.Errorf("PasstSocket = %s", got)
	}
}
