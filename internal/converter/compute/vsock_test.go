package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestVSOCK(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "none", Absent: []string{"<vsock"}},
		{Name: "cid from status", VMI: func(v *v1.VirtualMachineInstance) { v.Status.VSOCKCID = convtest.Ptr(uint32(123)) },
			Contains: []string{`<vsock model="virtio-non-transitional">`, `<cid auto="no" address="123">`}},
		{Name: "reserved cid", VMI: func(v *v1.VirtualMachineInstance) { v.Status.VSOCKCID = convtest.Ptr(uint32(2)) },
			Err: "status.VSOCKCID: 2 is reserved"},
	})
}
