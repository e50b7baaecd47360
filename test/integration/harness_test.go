// Package integration runs the real virt-launcher (through
// virt-launcher-monitor) as the unprivileged user virtlauncher, with its
// own libvirt daemon and QEMU, booting the test guest, and drives it over
// the real gRPC command socket as virt-handler would. The pod harness is
// internal/launchertest.
package integration

import (
	"os"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
)

// env is the binaries, test guest and launcher user, prepared once.
var env launchertest.Env

type (
	pod     = launchertest.Pod
	podOpts = launchertest.Options
)

func TestMain(m *testing.M) {
	os.Exit(launchertest.Main(m, &env, "vl-bin-", "./cmd/libvirt-hook-client"))
}
