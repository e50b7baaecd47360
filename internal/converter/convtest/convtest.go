// Package convtest holds test helpers shared by the converter's packages:
// libvirt schema validation of produced domains and a few ready-made VMIs.
// It is imported only from _test.go files.
package convtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"
	"libvirt.org/go/libvirtxml"

	"github.com/virtlauncher/virtlauncher/internal/converter"
	"github.com/virtlauncher/virtlauncher/internal/facts"
	"github.com/virtlauncher/virtlauncher/internal/layout"
)

// UID is the metadata.uid of the VMIs built here.
const UID = "6b8a3c1e-0b0a-4a59-9d43-2f2f7c0f1a11"

// Marshal renders dom as indented XML, failing the test on error.
func Marshal(t testing.TB, dom *libvirtxml.Domain) string {
	t.Helper()
	s, err := dom.Marshal()
	if err != nil {
		t.Fatalf("marshal domain: %v", err)
	}
	return s
}

// ValidateXML runs libvirt's own RelaxNG check (virt-xml-validate FILE
// domain) on a domain document and fails the test with its output.
func ValidateXML(t testing.TB, doc string) {
	t.Helper()
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		if testing.Short() { // the fast tier runs without libvirt
			t.Logf("-short: %s not validated: virt-xml-validate is not installed", t.Name())
			return
		}
		t.Fatalf("virt-xml-validate is not installed (package libvirt-clients + libxml2-utils): %v", err)
	}
	f := filepath.Join(t.TempDir(), "domain.xml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput()
	if err != nil {
		t.Fatalf("domain XML fails libvirt's schema: %v\n%s\n--- XML ---\n%s", err, strings.TrimSpace(string(out)), doc)
	}
}

// Validate marshals dom, checks it against libvirt's schema and returns the XML.
func Validate(t testing.TB, dom *libvirtxml.Domain) string {
	t.Helper()
	s := Marshal(t, dom)
	ValidateXML(t, s)
	return s
}

// Context is the facts of a stock KubeVirt node in the pod layout.
func Context() *facts.Context { return facts.Default(layout.Default()) }

// VMI returns a minimal defaulted amd64 VMI (what internal/vmi produces for a
// manifest with one containerDisk): 1 vCPU, 1Gi, q35, host-model, sata bus.
func VMI() *v1.VirtualMachineInstance {
	guest := resource.MustParse("1Gi")
	grace := int64(0)
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "testvmi", Namespace: "default", UID: UID},
		Spec: v1.VirtualMachineInstanceSpec{
			Architecture:                  "amd64",
			TerminationGracePeriodSeconds: &grace,
			Domain: v1.DomainSpec{
				CPU:      &v1.CPU{Sockets: 1, Cores: 1, Threads: 1, Model: v1.CPUModeHostModel},
				Memory:   &v1.Memory{Guest: &guest},
				Machine:  &v1.Machine{Type: "q35"},
				Firmware: &v1.Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223"},
				Features: &v1.Features{ACPI: v1.FeatureState{Enabled: Ptr(true)}},
				Devices: v1.Devices{
					Disks: []v1.Disk{{Name: "containerdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}},
				},
			},
			Volumes: []v1.Volume{{Name: "containerdisk", VolumeSource: v1.VolumeSource{
				ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/fedora:latest"},
			}}},
		},
	}
}

// Convert runs the whole converter on vmi and checks the result against
// libvirt's schema. It returns the domain and its XML.
func Convert(t testing.TB, vmi *v1.VirtualMachineInstance, c *facts.Context) (*libvirtxml.Domain, string) {
	t.Helper()
	dom, err := converter.Convert(vmi, c)
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	return dom, Validate(t, dom)
}

// CheckErr fails unless err matches want: nil for "", else containing want.
func CheckErr(t testing.TB, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
	return err == nil
}

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }
