package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestChannels(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "guest agent", Contains: []string{`<channel type="unix">`, `<target type="virtio" name="org.qemu.guest_agent.0">`}, Absent: []string{"vhostmd"}},
		{Name: "downward metrics", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.DownwardMetrics = &v1.DownwardMetrics{} },
			Contains: []string{`<source mode="bind" path="/var/run/kubevirt-private/downwardmetrics-channel/downwardmetrics.sock">`, `name="org.github.vhostmd.1"`}},
	})
}
