package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestConsole(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "serial with log", Contains: []string{`<source mode="bind" path="` + priv + `/virt-serial0">`,
			`<log file="` + priv + `/virt-serial0-log" append="on">`, `<console type="pty">`, `<target type="serial" port="0">`,
			`<controller type="virtio-serial" index="0"`}},
		{Name: "cluster disables the log", Ctx: func(c *facts.Context) { c.SerialConsoleLogDisabled = true }, Absent: []string{"<log"}},
		{Name: "vmi disables the log", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.LogSerialConsole = convtest.Ptr(false) }, Absent: []string{"<log"}},
		{Name: "vmi enables the log over the cluster", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Devices.LogSerialConsole = convtest.Ptr(true) },
			Ctx: func(c *facts.Context) { c.SerialConsoleLogDisabled = true }, Contains: []string{"<log"}},
		{Name: "off", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.AutoattachSerialConsole = convtest.Ptr(false)
		},
			Absent: []string{"<serial", "<console", "virtio-serial"}},
	})
}
