package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// rootShell gives a root launcher what a root container has: its own
// /run, /var/lib/libvirt, /var/cache/libvirt, /var/log/libvirt,
// /etc/libvirt and swtpm's /var/lib/swtpm-localca (tmpfs or a private
// directory, in a private mount namespace), a libvirt-qemu user (system mode resolves it before reading
// qemu.conf) in a private /etc/passwd, and a network namespace of its own
// (libvirt's system-mode drivers would otherwise touch the host's
// firewall). Nothing of the host is changed.
const rootShell = `set -e
D=$1; shift
mkdir -p $D/etc-libvirt
cp /etc/passwd $D/passwd; cp /etc/group $D/group
grep -q '^libvirt-qemu:' $D/passwd || echo 'libvirt-qemu:x:64055:64055::/nonexistent:/usr/sbin/nologin' >>$D/passwd
grep -q '^libvirt-qemu:' $D/group || echo 'libvirt-qemu:x:64055:' >>$D/group
mount --bind $D/passwd /etc/passwd
mount --bind $D/group /etc/group
mount -t tmpfs vl-run /run
for p in /var/lib/libvirt /var/cache/libvirt /var/log/libvirt; do mkdir -p $p; mount -t tmpfs vl-lib $p; done
[ ! -d /var/lib/swtpm-localca ] || mount -t tmpfs -o mode=0750,uid=$(id -u tss 2>/dev/null || echo 0) vl-ca /var/lib/swtpm-localca
mount --bind $D/etc-libvirt /etc/libvirt
exec "$@"
`

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
	args := []string{"--mount", "--net", "--propagation", "private", "/bin/sh", "-c", rootShell, "sh", p.Dir,
		filepath.Join(env.BinDir, "virt-launcher")}
	args = append(append(args, p.PodArgs()...), "--force-emulation")
	if opts.ImageVolume != nil {
		args = append(args, "--image-volume")
	}
	p.Cmd = exec.Command("unshare", args...)
	p.Cmd.Dir = p.Dir
	p.Cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "container=virtlauncher-test",
		"STANDALONE_VMI=" + p.VMIYAML("root-1", testguest.OptPowerOff)}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stderr, p.Stderr
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
