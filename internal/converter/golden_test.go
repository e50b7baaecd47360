package converter_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.xml from the converter's output")

// goldenFacts are the Context changes for golden files that need facts a
// launcher would have gathered (disk formats, block volumes, PCI addresses).
var goldenFacts = map[string]func(*facts.Context){
	"fedora-emulated.yaml": func(c *facts.Context) { c.Emulation = true },
	"arm64.yaml": func(c *facts.Context) {
		c.Arch = "arm64"
		c.EFI = facts.EFI{Code: "/usr/share/AAVMF/AAVMF_CODE.fd", Vars: "/usr/share/AAVMF/AAVMF_VARS.fd"}
	},
	"s390x.yaml": func(c *facts.Context) { c.Arch = "s390x" },
	"fedora.yaml": func(c *facts.Context) {
		c.Volumes = map[string]facts.Volume{"containerdisk": {BackingFormat: "qcow2"}}
		c.Interfaces = map[string]facts.Interface{"default": {MAC: "0a:58:0a:f4:00:2a", MTU: 1450}}
	},
	"storage-mix.yaml": func(c *facts.Context) {
		c.Volumes = map[string]facts.Volume{
			"root":    {BackingFormat: "qcow2"},
			"data":    {Block: true},
			"raw-lun": {Block: true},
			"legacy":  {Preallocated: true},
			"scratch": {NoDirectIO: true},
		}
	},
	"network-mix.yaml": func(c *facts.Context) {
		c.Interfaces = map[string]facts.Interface{"default": {MAC: "0a:58:0a:f4:00:07", MTU: 1400}, "red": {Tap: "tap2"}}
		c.Devices = facts.Devices{
			Env:        map[string]string{"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "0000:81:00.0", "PCI_RESOURCE_VENDOR_COM_NVME": "0000:c1:00.0,"},
			NetworkPCI: map[string]string{"fast": "0000:3b:02.1"},
		}
	},
	"host-devices.yaml": func(c *facts.Context) {
		c.Devices = facts.Devices{
			Env: map[string]string{
				"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": "0000:81:00.0",
				"MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q":   "5d4a4b2e-8c5f-4b3c-9a43-8f4d2b1c0e11,0b4c3a1e-6f2d-4e8a-b1c9-7d3e5f6a8b20",
				"PCI_RESOURCE_INTEL_COM_QAT":                "0000:3d:01.2",
				"USB_RESOURCE_KUBEVIRT_IO_STORAGE":          "3:7",
			},
			NetworkPCI: map[string]string{"fast": "0000:3b:02.4"},
			DRA: map[facts.DRARequest]facts.DRADevice{
				{Claim: "vgpu", Request: "gpu"}: {MDevUUID: "11111111-2222-3333-4444-555555555555", PCIBusID: "0000:82:00.0"},
			},
		}
	},
	"hotplug-hugepages.yaml": func(c *facts.Context) { c.SerialConsoleLogDisabled = true },
	"dedicated-numa.yaml": func(c *facts.Context) {
		// Cores 0/4 and 1/5 on cell 0, 2/6 and 3/7 on cell 1.
		c.CPUSet = []uint{0, 4, 2, 6, 1}
		for id, cores := range [][][]uint{{{0, 4}, {1, 5}}, {{2, 6}, {3, 7}}} {
			cell := facts.NUMACell{ID: uint(id)}
			for _, core := range cores {
				for _, t := range core {
					cell.CPUs = append(cell.CPUs, facts.HostCPU{ID: t, Siblings: core})
				}
			}
			c.HostNUMA = append(c.HostNUMA, cell)
		}
	},
}

func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "golden", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		base := filepath.Base(in)
		t.Run(base, func(t *testing.T) {
			v, err := vmi.LoadFile(in, vmi.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c := facts.Default(layout.Default())
			if fix := goldenFacts[base]; fix != nil {
				fix(c)
			}
			dom, err := converter.Convert(v, c)
			if err != nil {
				t.Fatal(err)
			}
			got := convtest.Validate(t, dom) + "\n"
			out := strings.TrimSuffix(in, ".yaml") + ".xml"
			if *update {
				if err := os.WriteFile(out, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(want, []byte(got)) {
				t.Errorf("%s differs from the converter's output (-update rewrites it):\n%s", out, lineDiff(string(want), got))
			}
			convtest.ValidateXML(t, string(want))
		})
	}
}

// lineDiff shows the first lines that differ, enough to see what changed.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
