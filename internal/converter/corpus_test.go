package converter_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/corpus"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// corpusFailures are the manifests that must fail, with the reason a user
// would accept: a cluster feature, or a device the launcher must be told
// about. Every other manifest must convert to schema-valid XML.
var corpusFailures = func() map[string]string {
	m := corpus.LoadFailures()
	maps.Copy(m, map[string]string{
		"vmi-gpu.yaml":             `spec.domain.devices.gpus[0]: no device for GPU "gpu1" of resource "nvidia.com/GP102GL_Tesla_P40": PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40 is unset`,
		"vmi-dra-pgpu.yaml":        `spec.domain.devices.gpus[0]: GPU "example-gpu": no DRA metadata read for claim "pgpu-resource-claim" request "pgpu"`,
		"vmi-usb.yaml":             `spec.domain.devices.hostDevices[0]: no device for host device "node-usb-to-vmi-storage" of resource "kubevirt.io/storage"`,
		"vmi-fedora-isolated.yaml": "spec.domain.cpu.dedicatedCpuPlacement: 1 vCPUs do not fit the pod's CPU set (empty, 0 CPUs",
	})
	return m
}()

// corpusWithDevices gives the device manifests the facts a launcher would
// have, to show they then convert.
var corpusWithDevices = map[string]func(*facts.Context){
	"vmi-gpu.yaml": func(c *facts.Context) {
		c.Devices.Env = map[string]string{"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "0000:81:00.0"}
	},
	"vmi-dra-pgpu.yaml": func(c *facts.Context) {
		c.Devices.DRA = map[facts.DRARequest]facts.DRADevice{{Claim: "pgpu-resource-claim", Request: "pgpu"}: {PCIBusID: "0000:81:00.0"}}
	},
	"vmi-usb.yaml":             func(c *facts.Context) { c.Devices.Env = map[string]string{"USB_RESOURCE_KUBEVIRT_IO_STORAGE": "1:5"} },
	"vmi-fedora-isolated.yaml": func(c *facts.Context) { c.CPUSet = []uint{2, 3} },
}

// convertFile loads a manifest as vlctl does and converts it.
func convertFile(path string, c *facts.Context) (string, error) {
	v, err := vmi.LoadFile(path, vmi.Options{})
	if err != nil {
		return "", err
	}
	dom, err := converter.Convert(v, c)
	if err != nil {
		return "", err
	}
	return dom.Marshal()
}

func TestCorpus(t *testing.T) {
	files := corpus.Files(t)
	var table []string
	for _, emulation := range []bool{false, true} {
		for _, path := range files {
			base := filepath.Base(path)
			t.Run(fmt.Sprintf("%s/emulation=%v", base, emulation), func(t *testing.T) {
				c := facts.Default(layout.Default())
				c.Emulation = emulation
				doc, err := convertFile(path, c)
				want, mustFail := corpusFailures[base]
				switch {
				case mustFail && err == nil:
					t.Fatalf("converted, but should fail with %q", want)
				case mustFail && !strings.Contains(err.Error(), want):
					t.Fatalf("error %q does not say %q", err, want)
				case !mustFail && err != nil:
					t.Fatalf("does not convert: %v", err)
				case err == nil:
					convtest.ValidateXML(t, doc)
					if emulation && (strings.Contains(doc, "host-model") || strings.Contains(doc, "host-passthrough") || !strings.Contains(doc, `<domain type="qemu">`)) {
						t.Errorf("emulated domain is not TCG-usable:\n%s", doc)
					}
				}
				if !emulation {
					r := "converts"
					if err != nil {
						r = "fails: " + err.Error()
					}
					table = append(table, fmt.Sprintf("| %s | %s |", base, r))
				}
				if fix, ok := corpusWithDevices[base]; ok {
					fix(c)
					doc, err := convertFile(path, c)
					if err != nil {
						t.Fatalf("with the device facts: %v", err)
					}
					convtest.ValidateXML(t, doc)
				}
			})
		}
	}
	sort.Strings(table)
	t.Logf("corpus:\n%s", strings.Join(table, "\n"))
}
