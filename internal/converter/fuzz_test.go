package converter_test

import (
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// FuzzConvert feeds arbitrary YAML through the loader and the converter: it
// must never panic, and a domain it returns must marshal. Seeds live in
// testdata/fuzz/FuzzConvert (KubeVirt's examples and the golden inputs).
// VMIs that only parse (not defaulted, not validated) are converted too, to
// reach the converter's handling of nil and zero fields.
func FuzzConvert(f *testing.F) {
	f.Add([]byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata:\n  name: x\nspec:\n  domain:\n    devices: {}\n    memory:\n      guest: 64Mi\n"))
	ctxs := []*facts.Context{facts.Default(layout.Default()), facts.Default(layout.Under("/tmp/vl"))}
	ctxs[1].Emulation = true
	ctxs[1].Devices = facts.Devices{Env: map[string]string{"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "0000:81:00.0,bad", "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4_1Q": "5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11"},
		NetworkPCI: map[string]string{"sriov-net": "bad"}}
	ctxs[1].Volumes = map[string]facts.Volume{"containerdisk": {BackingFormat: "qcow2", Block: true, NoDirectIO: true}}
	ctxs[1].CPUSet = []uint{0, 1}
	f.Fuzz(func(t *testing.T, data []byte) {
		if v, err := vmi.Parse(data); err == nil {
			for _, c := range ctxs {
				convert(t, v.DeepCopy(), c)
			}
		}
		for _, o := range []vmi.Options{{}, {DefaultBinding: vmi.BindingBridge, Arch: "arm64"}} {
			v, err := vmi.Load(data, o)
			if err != nil {
				continue
			}
			for _, c := range ctxs {
				convert(t, v.DeepCopy(), c)
			}
		}
	})
}

func convert(t *testing.T, v *v1.VirtualMachineInstance, c *facts.Context) {
	dom, err := converter.Convert(v, c)
	if err != nil {
		return
	}
	if _, err := dom.Marshal(); err != nil {
		t.Fatalf("converted domain does not marshal: %v", err)
	}
}
