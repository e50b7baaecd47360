package compute_test

import (
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
)

func TestIOMMUFD(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "a pod without the device plugin's socket converts as before", Absent: []string{"iommufd"}},
		{Name: "a pod given the socket is refused, naming it and libvirt's lack",
			Ctx: func(c *facts.Context) { c.Devices.IOMMUFD = true },
			Err: "/var/run/kubevirt/iommufd.sock (KubeVirt's IOMMUFD feature gate): not supported: libvirt 9.0 has no <iommufd>"},
	})
}
