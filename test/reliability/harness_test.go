// Package reliability tries the real launcher with bad input, faults,
// concurrent clients and hostile surroundings: the real monitor and
// launcher run as the unprivileged user virtlauncher with their own libvirt
// daemon and QEMU (TCG) booting the test guest, driven over the real gRPC
// command socket. See README.md for what is covered and the soak variants.
// The pod harness is internal/launchertest.
package reliability

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/cmdclient"
	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

var soakFlag = flag.Bool("soak", false, "run the long soak variants (also VL_SOAK=1)")

// soak reports whether the long variants run.
func soak() bool { return *soakFlag || os.Getenv("VL_SOAK") == "1" }

// env is the binaries (virt-launcher, virt-launcher-monitor, vlctl), test
// guest and launcher user, prepared once.
var env launchertest.Env

const bootTimeout = 120 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(launchertest.Main(m, &env, "vl-rel-bin-", "./cmd/vlctl"))
}

// pod is a launcher pod that records every descendant of the monitor.
type pod struct{ *launchertest.Pod }

type podOpts struct {
	grace int
	// ephemeralTmpfs mounts a tmpfs of this size (e.g. "128k") as the
	// ephemeral disk directory.
	ephemeralTmpfs string
}

func newPod(t *testing.T, name string, o podOpts) *pod {
	t.Helper()
	p := newPodDeferred(t, name, o)
	p.Start()
	return p
}

// newPodDeferred is newPod before Start (the caller may add to the
// monitor's environment).
func newPodDeferred(t *testing.T, name string, o podOpts) *pod {
	t.Helper()
	return &pod{env.NewDeferred(t, name, launchertest.Options{
		DirPrefix:        "vlr",
		QemuTimeout:      5 * time.Minute,
		Grace:            o.grace,
		SharedCaps:       true,
		EphemeralTmpfs:   o.ephemeralTmpfs,
		TrackDescendants: true,
		LeftWait:         10 * time.Second,
		LogTail:          8000,
	})}
}

// vmi is the test VMI printing the pod's name as token.
func (p *pod) vmi(kernelArgs ...string) *v1.VirtualMachineInstance {
	p.T.Helper()
	return p.VMI(p.Name, kernelArgs...)
}

// boot syncs the test VMI and waits for the guest's shell.
func (p *pod) boot(ctx context.Context, c *cmdclient.Client, kernelArgs ...string) {
	p.T.Helper()
	if err := c.Sync(ctx, p.vmi(kernelArgs...), nil); err != nil {
		p.T.Fatalf("Sync: %v\n%s", err, launchertest.Tail(p.Stderr.String(), 4000))
	}
	p.WaitConsole(testguest.MarkerReady, bootTimeout)
}

// assertNothingLeft: no process of the pod survives (neither one ever seen
// under the monitor nor one whose command line names the pod directory),
// and no socket is left in the pod directory.
func (p *pod) assertNothingLeft() {
	p.T.Helper()
	p.AssertNothingLeft()
	if socks := socketsUnder(p.Dir); len(socks) > 0 {
		p.T.Errorf("sockets left behind: %v", socks)
	}
}

func socketsUnder(dir string) []string {
	var out []string
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSocket != 0 {
			out = append(out, path)
		}
		return nil
	})
	return out
}
