package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestUSBRedir(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "four sockets", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.ClientPassthrough = &v1.ClientPassthroughDevices{}
		},
			Contains: []string{`<redirdev type="unix" bus="usb">`, `path="` + priv + `/virt-usbredir-0"`, `path="` + priv + `/virt-usbredir-3"`, `model="qemu-xhci"`},
			Absent:   []string{"virt-usbredir-4"}},
	})
}
