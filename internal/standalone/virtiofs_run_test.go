package standalone_test

import (
	"strings"
	"testing"
	"time"

	"github.com/virtlauncher/virtlauncher/internal/testguest"
)

// vfsVMI shares the ConfigMap app-config with the guest by virtiofs; its
// user data mounts the share by the filesystem's name and prints a key.
var vfsVMI = testguest.Manifest{
	Meta:   testguest.Meta{Name: "vfs"},
	Boot:   testguest.Boot{Kernel: "KERNELDIR", Cmdline: strings.Join([]string{testguest.DefaultCmdline, testguest.OptPowerOff, testguest.OptNoDHCP}, " ")},
	Sizing: testguest.Sizing{Memory: "256Mi", GuestMemory: true},
	Disks:  testguest.Disks{Root: "ROOTDISK", UserData: vfsUserData},
	Grace:  10,
	Shares: []testguest.Share{{Name: "app", ConfigMap: "app-config"}},
}.YAML() + `---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  mode: "shared-by-virtiofs"
`

const vfsUserData = `#!/bin/sh
mkdir -p /mnt/app
mount -t virtiofs app /mnt/app 2>&1
echo "VL-""VIRTIOFS $(cat /mnt/app/mode 2>&1) owner=$(stat -c %u:%g /mnt/app/mode 2>&1) mounts=$(grep -c ' virtiofs ' /proc/mounts)"
`

// TestVlctlRunVirtiofs: a VMI with a ConfigMap shared by virtiofs. vlctl
// run starts the filesystem's virtiofsd (the wrapper, as KubeVirt's
// virtiofs container runs it) as the VM's user with its socket where the
// domain expects it; the guest mounts the share by the filesystem's name
// and reads the key's value, owned by root (the daemon's user is root in
// its user namespace). When the guest has powered off, nothing of the run
// is left, the daemon included.
func TestVlctlRunVirtiofs(t *testing.T) {
	needRoot(t)
	file := guestManifest(t, "vfs", vfsVMI)
	root := workRoot(t)
	start := time.Now()
	code, stdout, stderr := vlctl(t, 4*time.Minute, "run", "--emulation", "--workdir", root, "--record-dir", workRoot(t), file)
	t.Logf("vlctl run took %s", time.Since(start).Round(time.Millisecond))
	console := strings.ReplaceAll(stdout, "\r\n", "\n")
	if code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s\nconsole:\n%s", code, stderr, console)
	}
	got, ok := testguest.FindMarker(console, "VL-VIRTIOFS")
	if !ok {
		t.Fatalf("the guest did not report the share; console:\n%s", console)
	}
	t.Logf("guest: VL-VIRTIOFS %s", strings.TrimSpace(got))
	if want := "shared-by-virtiofs owner=0:0 mounts=1"; strings.TrimSpace(got) != want {
		t.Errorf("the guest read %q from the virtiofs share, want %q", strings.TrimSpace(got), want)
	}
	checkNothingLeft(t, root)
}
