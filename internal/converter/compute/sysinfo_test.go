package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestSysInfo(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "cluster defaults without empty entries", Contains: []string{
			`<entry name="uuid">5d307ca9-b3ef-428c-8861-06e72d69f223</entry>`, `<entry name="manufacturer">KubeVirt</entry>`,
			`<entry name="family">KubeVirt</entry>`, `<entry name="product">None</entry>`},
			Absent: []string{`name="sku"`, `name="version"`, `name="serial"`, "<chassis>", "<entry name=\"sku\"></entry>"}},
		{Name: "serial, sku, version and chassis", VMI: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Serial = "S123"
			v.Spec.Domain.Chassis = &v1.Chassis{Manufacturer: "ACME", Asset: "A1"}
		}, Ctx: func(c *facts.Context) { c.SMBIOS.SKU, c.SMBIOS.Version = "sku1", "v9" }, Contains: []string{
			`<entry name="serial">S123</entry>`, `<entry name="sku">sku1</entry>`, `<entry name="version">v9</entry>`,
			`<chassis>`, `<entry name="manufacturer">ACME</entry>`, `<entry name="asset">A1</entry>`}},
		{Name: "nothing at all", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.Domain.Firmware = nil },
			Ctx: func(c *facts.Context) { c.SMBIOS = facts.SMBIOS{} }, Absent: []string{"<sysinfo", "<smbios"}},
	})
}
