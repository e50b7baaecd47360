package compute_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestMetadata(t *testing.T) {
	convtest.Run(t, []convtest.Case{
		{Name: "name uid grace", Contains: []string{`<name>default_testvmi</name>`,
			`<metadata><kubevirt xmlns="http://kubevirt.io"><uid>6b8a3c1e-0b0a-4a59-9d43-2f2f7c0f1a11</uid><graceperiod><deletionGracePeriodSeconds>0</deletionGracePeriodSeconds></graceperiod></kubevirt></metadata>`},
			Absent: []string{"<uuid>"}},
		{Name: "namespace and default grace", VMI: func(v *v1.VirtualMachineInstance) {
			v.Namespace = "prod"
			v.Spec.TerminationGracePeriodSeconds = nil
		}, Contains: []string{`<name>prod_testvmi</name>`, `<deletionGracePeriodSeconds>30</deletionGracePeriodSeconds>`}},
		{Name: "uid is escaped", VMI: func(v *v1.VirtualMachineInstance) { v.UID = "a<b&c" },
			Contains: []string{`<uid>a&lt;b&amp;c</uid>`}},
		{Name: "no name", VMI: func(v *v1.VirtualMachineInstance) { v.Name = "" }, Err: "metadata.name: must not be empty"},
		{Name: "negative grace", VMI: func(v *v1.VirtualMachineInstance) { v.Spec.TerminationGracePeriodSeconds = convtest.Ptr(int64(-1)) },
			Err: "spec.terminationGracePeriodSeconds: -1 is negative"},
	})
}
