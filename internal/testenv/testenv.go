// Package testenv is the one rule for what a test needs from the machine
// (root, an installed program, a user, the libvirt daemon, a bootable test
// guest). `go test -short` is the fast tier: it skips every test that
// needs one of them, saying which, so it runs in seconds without root,
// libvirt or QEMU. The full run (make test) fails such a test when what it
// needs is missing, so that a machine without a dependency cannot pass by
// skipping: scripts/install-deps installs everything it needs.
//
// It is also the home of what every kind of test shares and that must not
// depend on the rest of the project: SyncBuffer and Binaries.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Need makes t depend on what: skipped in the fast tier, failed at once
// when missing is not nil in the full run.
func Need(t testing.TB, what string, missing error) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: needs %s", what)
	}
	if missing != nil {
		t.Fatalf("needs %s: %v (scripts/install-deps installs what the tests need; go test -short skips this test)", what, missing)
	}
}

// Root makes t need root; why says what for (network namespaces, other
// users, mounts, ...).
func Root(t testing.TB, why string) {
	t.Helper()
	Need(t, "root: "+why, RootErr())
}

// RootErr says why this process is not root (nil when it is).
func RootErr() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("running as uid %d, not root", os.Geteuid())
	}
	return nil
}

// Programs makes t need root and the named programs in PATH.
func Programs(t testing.TB, names ...string) {
	t.Helper()
	Need(t, fmt.Sprintf("root and %v", names), errors.Join(RootErr(), Installed(names...)))
}

// Installed says which of the named programs are not in PATH (nil when
// all are).
func Installed(names ...string) error {
	var errs []error
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			errs = append(errs, fmt.Errorf("%s not installed", n))
		}
	}
	return errors.Join(errs...)
}

// Slow leaves t out of the fast tier: it needs nothing missing from the
// machine, only more time than `go test -short` is for (a go build of a
// binary, say).
func Slow(t testing.TB, why string) {
	t.Helper()
	Need(t, why, nil)
}
