package vmi

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/virtlauncher/virtlauncher/internal/corpus"
)

// corpusFailures are the manifests that must not load, with why. Everything
// else in the corpus must load.
var corpusFailures = corpus.LoadFailures()

func TestCorpus(t *testing.T) {
	files := corpus.Files(t)
	loaded, failed := 0, 0
	for _, path := range files {
		base := filepath.Base(path)
		vmi, err := LoadFile(path, Options{})
		wantErr, mustFail := corpusFailures[base]
		switch {
		case err != nil && mustFail:
			failed++
			if !strings.Contains(err.Error(), wantErr) {
				t.Errorf("%s: error %q does not say %q", base, err, wantErr)
			}
			t.Logf("FAIL (expected) %-40s %s", base, firstLine(err.Error()))
		case err != nil:
			t.Errorf("%s: does not load: %v", base, err)
		case mustFail:
			t.Errorf("%s: loaded, but should fail with %q", base, wantErr)
		default:
			loaded++
			t.Logf("ok              %-40s %s/%s disks=%d ifaces=%d", base, vmi.Namespace, vmi.Name,
				len(vmi.Spec.Domain.Devices.Disks), len(vmi.Spec.Domain.Devices.Interfaces))
			// What the converter relies on after loading.
			if vmi.UID == "" || vmi.Spec.Domain.Firmware == nil || vmi.Spec.Domain.Firmware.UUID == "" ||
				vmi.Spec.Domain.Memory == nil || vmi.Spec.Domain.Memory.Guest == nil || vmi.Spec.Domain.CPU == nil {
				t.Errorf("%s: defaults missing", base)
			}
			for i, d := range vmi.Spec.Domain.Devices.Disks {
				_, bus, n := diskTarget(d)
				if n != 1 || bus == "" {
					t.Errorf("%s: disk %d (%s) has no target or bus", base, i, d.Name)
				}
			}
			again := vmi.DeepCopy()
			SetDefaults(again, Options{})
			if !equality.Semantic.DeepEqual(vmi, again) {
				t.Errorf("%s: SetDefaults is not idempotent", base)
			}
			if vmi.Spec.Domain.Devices.AutoattachPodInterface == nil && len(vmi.Spec.Domain.Devices.Interfaces) == 0 {
				t.Errorf("%s: no interface", base)
			}
		}
	}
	corpus.Listed(t, corpusFailures)
	t.Logf("%d manifests: %d load, %d fail as expected", len(files), loaded, failed)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestCorpusFedora checks the defaulted examples/vmi-fedora.yaml against
// kubevirt-conversion.md section C (KubeVirt's own mutator output).
func TestCorpusFedora(t *testing.T) {
	vmi, err := LoadFile(corpus.File(t, "vmi-fedora.yaml"), Options{DefaultBinding: BindingBridge})
	if err != nil {
		t.Fatal(err)
	}
	d := vmi.Spec.Domain
	eq(t, "machine", d.Machine.Type, "q35")
	eq(t, "cpu model", d.CPU.Model, "host-model")
	eq(t, "topology", [4]uint32{d.CPU.Sockets, d.CPU.Cores, d.CPU.Threads, d.CPU.MaxSockets}, [4]uint32{1, 1, 1, 4})
	eq(t, "guest", d.Memory.Guest.Value(), int64(1024000000))
	if d.Memory.MaxGuest != nil {
		t.Errorf("1024M must get no maxGuest, got %v", d.Memory.MaxGuest)
	}
	eq(t, "firmware uuid", string(d.Firmware.UUID), "12505594-71e6-5333-990c-4f9aa32f9b14")
	eq(t, "acpi", *d.Features.ACPI.Enabled, true)
	// The manifest names its interface, so the binding option does not apply.
	if len(d.Devices.Interfaces) != 1 || d.Devices.Interfaces[0].Masquerade == nil {
		t.Errorf("interfaces %+v", d.Devices.Interfaces)
	}
	eq(t, "disk buses", []string{string(d.Devices.Disks[0].Disk.Bus), string(d.Devices.Disks[1].Disk.Bus)}, []string{"virtio", "virtio"})
	eq(t, "pull policy", string(vmi.Spec.Volumes[0].ContainerDisk.ImagePullPolicy), "IfNotPresent")
	eq(t, "grace period", GracePeriodSeconds(vmi), int64(0))
	eq(t, "pci topology", vmi.Annotations[PCITopologyAnnotation], "v3")
	eq(t, "runtime user", vmi.Status.RuntimeUser, uint64(107))
	if d.Clock != nil || d.Devices.Watchdog != nil || len(d.Devices.Inputs) != 0 {
		t.Errorf("no clock, watchdog or inputs expected: %+v %+v %+v", d.Clock, d.Devices.Watchdog, d.Devices.Inputs)
	}
}
