// Package corpus is KubeVirt's published example manifests as the tests
// read them: found beside the checkout by internal/repo (VL_CORPUS
// overrides; SOURCE.md there says where they come from), and the ones
// vmi.Load refuses, with why. A missing corpus fails the test: it must run
// in CI.
package corpus

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/repo"
)

// Dir is the corpus directory.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := repo.Corpus()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Files are the corpus's manifests, at least one.
func Files(t testing.TB) []string {
	t.Helper()
	dir := Dir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	return files
}

// File is the path of the corpus's manifest name, which must be there.
func File(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(t), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("corpus: %v", err)
	}
	return p
}

// Instancetyped are the manifests that name an instancetype or a
// preference, with vmi.Load's refusal: virt-api expands them in a
// cluster, and vlctl run with an Expander (internal/instancetype, whose
// TestCorpus loads them with their instancetypes).
var Instancetyped = map[string]string{
	"vm-cirros-clarge-virtio.yaml":   "spec.instancetype: instancetypes are expanded by a KubeVirt cluster",
	"vm-cirros-clarge-windows.yaml":  "spec.instancetype: instancetypes are expanded by a KubeVirt cluster",
	"vm-cirros-clarge.yaml":          "spec.instancetype: instancetypes are expanded by a KubeVirt cluster",
	"vm-cirros-cluster-csmall.yaml":  "spec.instancetype: instancetypes are expanded by a KubeVirt cluster",
	"vm-cirros-csmall.yaml":          "spec.instancetype: instancetypes are expanded by a KubeVirt cluster",
	"vm-windows-clarge-windows.yaml": "spec.preference: preferences are expanded by a KubeVirt cluster",
}

// OtherKinds are the manifests of kinds that describe many VMs or a
// template fragment, not one VM, with the refusal.
var OtherKinds = map[string]string{
	"vm-pool-cirros.yaml":        `kind: "VirtualMachinePool"`,
	"vmi-preset-small.yaml":      `kind: "VirtualMachineInstancePreset"`,
	"vmi-replicaset-cirros.yaml": `kind: "VirtualMachineInstanceReplicaSet"`,
}

// LoadFailures are the manifests vmi.Load (without an Expander) refuses,
// with a part of its error: Instancetyped and OtherKinds, in a map of the
// caller's own, to add what its own step refuses.
func LoadFailures() map[string]string {
	m := maps.Clone(Instancetyped)
	maps.Copy(m, OtherKinds)
	return m
}

// Listed fails t for every manifest named in m that the corpus no longer
// has: a list of expected failures must not outlive its manifests.
func Listed(t testing.TB, m map[string]string) {
	t.Helper()
	dir := Dir(t)
	for name := range m {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("expected failure %s is not in the corpus any more", name)
		}
	}
}
