package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// TestRootMode: as uid 0 "in a container" the launcher runs the daemon in
// system mode (qemu:///system) with its own config; the guest boots from
// STANDALONE_VMI and powers off, and the launcher exits 0. Both pod
// layouts: the classic one, and KubeVirt's ImageVolume gate's (read-only
// image volumes, which libvirt's system-mode ownership handling must
// leave alone).
func TestRootMode(t *testing.T) {
	t.Parallel()
	testenv.Programs(t, "unshare")
	for _, tc := range []struct {
		name string
		opts podOpts
	}{
		{"classic", podOpts{}},
		{"image-volume", podOpts{ImageVolume: &launchertest.ImageVolumeLayout{}}},
	} {
		t.Run(tc.name, func(t *testing.T) { testRootMode(t, tc.opts) })
	}
}

func testRootMode(t *testing.T, opts podOpts) {
	p := env.NewDeferred(t, "rootvm", opts)
	args := append(p.PodArgs(), "--force-emulation")
	if opts.ImageVolume != nil {
		args = append(args, "--image-volume")
	}
	p.AsRootContainer(filepath.Join(env.BinDir, "virt-launcher"), args, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"STANDALONE_VMI=" + p.VMIYAML("root-1", testguest.OptPowerOff)})
	p.Start()
	p.WaitReady(60 * time.Second)
	p.WaitConsole(testguest.MarkerPowerOff, 2*bootTimeout)
	if code := p.ExitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	out := p.Stderr.String()
	if !strings.Contains(out, `"socket":"`+p.Layout.LibvirtRunDir+`/libvirt/libvirt-sock"`) &&
		!strings.Contains(out, `"socket":"`+p.Layout.LibvirtRunDir+`/libvirt/virtqemud-sock"`) {
		t.Errorf("system-mode daemon socket not in the launcher's run dir")
	}
	if _, err := os.Stat(filepath.Join(p.Dir, "etc-libvirt", "qemu.conf")); err != nil {
		t.Errorf("qemu.conf not written to the (private) /etc/libvirt: %v", err)
	}
	p.AssertNothingLeft()
}
