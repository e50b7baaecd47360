package suite

import (
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestStandInGuestRepo checks the stand-ins are pushed under the names
// KubeVirt v1.8.2's suite pulls (tests/containerdisk/containerdisk.go,
// ContainerDiskFromRegistryFor): a VMI of the suite whose image is missing
// stays Pending until its spec times out.
func TestStandInGuestRepo(t *testing.T) {
	want := map[string]string{
		testguest.LoginAlpine:            "alpine-container-disk-demo",
		testguest.LoginCirros:            "cirros-container-disk-demo",
		testguest.LoginAlpineTestTooling: "alpine-with-test-tooling-container-disk",
		testguest.LoginFedoraTestTooling: "fedora-with-test-tooling-container-disk",
	}
	if len(standInGuests) != len(want) {
		t.Fatalf("%d stand-in guests, the test knows %d", len(standInGuests), len(want))
	}
	for _, g := range standInGuests {
		w, ok := want[g.name]
		if !ok {
			t.Fatalf("stand-in %q: the test does not know the suite's name for it", g.name)
		}
		if got := standInGuestRepo(g.name); got != w {
			t.Errorf("stand-in %q pushed as %q, the suite pulls %q", g.name, got, w)
		}
	}
}
