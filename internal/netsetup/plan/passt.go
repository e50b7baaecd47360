package plan

import (
	"path/filepath"
	"strconv"
	"strings"

	v1 "kubevirt.io/api/core/v1"
)

// PasstLogName is the file passt logs to in the launcher's share dir
// (/var/run/kubevirt/passt.log in a pod), where virt-handler reads it.
const PasstLogName = "passt.log"

// PasstPodIface is the pod interface of a passt interface: the one
// virt-handler reported in the VMI's status, else eth0 (passt is only on
// the pod network, whose interface that is; vlctl runs report none).
func PasstPodIface(vmi *v1.VirtualMachineInstance, name string) string {
	for _, st := range vmi.Status.Interfaces {
		if st.Name == name && st.PodInterfaceName != "" {
			return st.PodInterfaceName
		}
	}
	return "eth0"
}

// PasstSocket is the unix socket on which the launcher's passt for the pod
// interface podIface waits for QEMU, in the launcher's private dir.
func PasstSocket(dir, podIface string) string {
	return filepath.Join(dir, "passt-"+podIface+".sock")
}

// PasstPidFile is where that passt writes its pid.
func PasstPidFile(dir, podIface string) string {
	return filepath.Join(dir, "passt-"+podIface+".pid")
}

// istioInject is the annotation with which Istio's ports stay the proxy's.
const istioInject = "sidecar.istio.io/inject"

// istioPorts are the Envoy ports KubeVirt keeps out of passt's forwards
// when Istio injects its proxy.
var istioPorts = []int{15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15053, 15090}

// PasstForwards are KubeVirt's forwards of a passt interface as passt's
// -t and -u specs ("" forwards nothing of that protocol): the declared
// ports by protocol; every TCP and UDP port when none is declared; with
// Istio's proxy injected its ports are excluded from TCP (and then, with
// no port declared, only TCP is forwarded, as in KubeVirt).
func PasstForwards(vmi *v1.VirtualMachineInstance, ports []Port) (tcp, udp string) {
	var t, u []string
	if strings.EqualFold(vmi.Annotations[istioInject], "true") {
		for _, p := range istioPorts {
			t = append(t, "~"+strconv.Itoa(p))
		}
	}
	for _, p := range ports {
		if p.Protocol == "UDP" {
			u = append(u, strconv.Itoa(int(p.Port)))
		} else {
			t = append(t, strconv.Itoa(int(p.Port)))
		}
	}
	if len(t) == 0 && len(u) == 0 {
		return "all", "all"
	}
	return strings.Join(t, ","), strings.Join(u, ",")
}
