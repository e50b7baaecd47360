// Package launchertest starts the real virt-launcher-monitor (and through
// it virt-launcher) as the unprivileged user virtlauncher in a directory
// laid out like KubeVirt's pod volumes, booting the test guest. It is the
// harness shared by test/integration, test/reliability and
// test/conformance, and the bench's account (TestUser); only tests and the
// bench import it.
package launchertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestUser is the account the launchers of the tests and the bench run
// as (scripts/install-deps creates it); vlctl run gives each VM an id of
// its own instead (internal/uidpool).
const TestUser = "virtlauncher"

// Env is what a test binary prepares once: the built binaries, the shared
// QEMU capability cache, the test guest and the launcher user's ids.
type Env struct {
	BinDir  string              // virt-launcher, virt-launcher-monitor and any extra commands
	CapsDir string              // --qemu-caps-cache shared by the pods that opt in
	Guest   *testguest.Guest    // the test guest, built once
	Cred    *syscall.Credential // user virtlauncher
	// Err says why pods cannot run here (not root, no user virtlauncher,
	// no test guest); nil when they can. The binaries are built anyway.
	Err error
}

// Main is a TestMain body: it builds virt-launcher, virt-launcher-monitor
// and the extra command packages (e.g. "./cmd/vlctl") into a fresh
// directory named after prefix, prepares e, runs the tests and removes the
// directory. A build failure fails the test binary (exit 1); a machine
// that cannot run pods only sets e.Err, on which Need fails each test. In
// the fast tier (-short) nothing is built or prepared. Pass the result to
// os.Exit.
func Main(m *testing.M, e *Env, prefix string, extraCmds ...string) int {
	flag.Parse()
	if testing.Short() {
		e.Err = errors.New("-short")
		return m.Run()
	}
	dir, err := testenv.Binaries(prefix, append([]string{"./cmd/virt-launcher", "./cmd/virt-launcher-monitor"}, extraCmds...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	e.BinDir = dir
	e.Err = e.prepare(dir)
	return m.Run()
}

// MainBinaries is a TestMain body for tests that run the project's
// commands without a pod Env: as root and outside the fast tier it builds
// pkgs (testenv.Binaries) into a directory named after prefix, sets
// *binDir to it, runs the tests and removes it; otherwise it runs them
// without (each fails or skips by testenv). Pass the result to os.Exit.
func MainBinaries(m *testing.M, binDir *string, prefix string, pkgs ...string) int {
	flag.Parse()
	if os.Geteuid() != 0 || testing.Short() {
		return m.Run()
	}
	dir, err := testenv.Binaries(prefix, pkgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binDir = dir
	return m.Run()
}

func (e *Env) prepare(dir string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root to start the launcher as user virtlauncher")
	}
	uid, gid, err := pod.LookupUser(TestUser)
	if err != nil {
		return err
	}
	e.Cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	e.CapsDir = filepath.Join(dir, "qemu-caps")
	if err := os.Mkdir(e.CapsDir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(e.CapsDir, uid, gid); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := testguest.Build(ctx, testguest.DefaultCacheDir())
	if err != nil {
		return fmt.Errorf("build test guest: %w", err)
	}
	e.Guest = g
	return nil
}

// NeedBinaries makes t need only the binaries Main builds (skipped in the
// fast tier, which builds none).
func (e *Env) NeedBinaries(t testing.TB) {
	t.Helper()
	testenv.Need(t, "the binaries TestMain builds", nil)
}

// Need makes t need launcher pods (testenv.Need): skipped in the fast
// tier, failed when they cannot run here.
func (e *Env) Need(t testing.TB) {
	t.Helper()
	testenv.Need(t, "launcher pods (root, user virtlauncher, libvirt, QEMU, the test guest)", e.Err)
}
