package converter_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/converter/convtest"
)

func TestConvertArguments(t *testing.T) {
	if _, err := converter.Convert(nil, convtest.Context()); err == nil || !strings.Contains(err.Error(), "no VMI") {
		t.Errorf("nil VMI: %v", err)
	}
	if _, err := converter.Convert(convtest.VMI(), nil); err == nil || !strings.Contains(err.Error(), "default/testvmi: no context") {
		t.Errorf("nil context: %v", err)
	}
	v := convtest.VMI()
	v.Spec.Domain.CPU.Sockets = 1000
	if _, err := converter.Convert(v, convtest.Context()); err == nil || !strings.HasPrefix(err.Error(), "convert default/testvmi: spec.domain.cpu") {
		t.Errorf("errors name the VMI and the field: %v", err)
	}
}

// TestConvertIsPure: the same inputs give the same XML, and neither the VMI
// nor the Context is changed.
func TestConvertIsPure(t *testing.T) {
	for _, emulation := range []bool{false, true} {
		v, c := convtest.VMI(), convtest.Context()
		c.Emulation = emulation
		v0, c0 := v.DeepCopy(), *c
		_, first := convtest.Convert(t, v, c)
		_, second := convtest.Convert(t, v, c)
		if first != second {
			t.Errorf("two conversions differ:\n%s\n---\n%s", first, second)
		}
		if !equality.Semantic.DeepEqual(v, v0) {
			t.Error("Convert changed the VMI")
		}
		if fmt.Sprint(*c) != fmt.Sprint(c0) {
			t.Error("Convert changed the Context")
		}
	}
}

// TestConfiguratorOrder pins KubeVirt's order (B.1), minus the steps this
// launcher does not have (launchSecurity, virtiofs, iothreads as a step of
// its own), plus the refused annotations right after the metadata;
// the qemu command line is Ignition.
func TestConfiguratorOrder(t *testing.T) {
	var got []string
	for _, s := range converter.Configurators(convtest.Context()) {
		got = append(got, strings.TrimPrefix(fmt.Sprintf("%T", s), "compute."))
	}
	want := "Metadata Annotations network.configurator TPM VSOCK Channels Clock RNG Input Balloon Graphics Sound hostdev.configurator Watchdog Console Panic Features SysInfo OS storage.virtiofs storage.configurator USBRedir Controllers Ignition CPU Memory MemoryBacking RebootPolicy IOMMUFD Hypervisor CPUPinning PCIPlacement"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("order:\n got %s\nwant %s", g, want)
	}
}
