package reliability

// A manifest's hostDisk names a path of the host, and a manifest is often
// someone else's (a tutorial's, a colleague's). `vlctl run` runs as root:
// it must not hand the VM's id a file of the host, or create one in a
// directory of the host, because a manifest asked. As docker run needs -v
// for a host path, the person running vlctl allows directories with
// --allow-host-path; elsewhere a hostDisk is refused before anything is
// made, and a link cannot lead out of an allowed directory.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/standalone"
)

const hostPathManifest = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: hostpath
  namespace: default
spec:
  domain:
    resources:
      requests:
        memory: 64Mi
    devices:
      disks:
      - name: data
        disk:
          bus: virtio
      - name: new
        disk:
          bus: virtio
  volumes:
  - name: data
    hostDisk:
      path: %s
      type: Disk
  - name: new
    hostDisk:
      path: %s
      type: DiskOrCreate
      capacity: 1Mi
`

// hostDiskMonitor is the VM user's side of the run: started by vlctl run
// as virt-launcher-monitor, it reads each hostDisk through the link root
// made (as QEMU would) and notes what it read, then ends as a failed
// launcher.
const hostDiskMonitor = `#!/bin/sh
out='@OUT@'; w=$(pwd)
echo "started" >>"$out/notes"
for f in "$w"/private/vmi-disks/*/*; do
	if c=$(head -c 64 "$f"); then
		echo "read $(basename "$f") $c" >>"$out/notes"
	else
		echo "denied $(basename "$f")" >>"$out/notes"
	fi
done
echo "hostdisk monitor done"
exit 3
`

// hostPathRun runs manifest (standalone.Run, as root) with the script
// monitor as u, allowing dirs with --allow-host-path.
func hostPathRun(t *testing.T, l *linkRun, records string, dirs ...string) (string, error) {
	t.Helper()
	var status strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := standalone.Run(ctx, standalone.Config{
		File: l.manifest, Binding: "bridge", WorkRoot: l.workRoot, UIDs: l.uids, BinDir: l.binDir,
		CapsCache: "none", RecordDir: records, Emulation: true,
		Console: &strings.Builder{}, Status: &status,
	})
	return status.String(), err
}

// TestHostPathNotAllowed: `vlctl run` of a manifest whose hostDisks name
// a root-owned 0600 file (an /etc/shadow stand-in) and a DiskOrCreate file
// in a root-owned directory (an /etc/profile.d stand-in), with no
// --allow-host-path: refused naming the volumes, the paths and the flag,
// before anything is made. The VM's launcher never starts, the file has no
// ACL, nothing is created, the work root and record dir are empty.
func TestHostPathNotAllowed(t *testing.T) {
	u := needLinkUser(t)
	c := newCanary(t)
	out := userDir(t, u)
	secret := filepath.Join(c.dir, "secret")
	evil := filepath.Join(c.dir, "sub", "evil.sh")
	manifest := filepath.Join(t.TempDir(), "vmi.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(hostPathManifest, secret, evil)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := strings.ReplaceAll(hostDiskMonitor, "@OUT@", out)
	for _, n := range []string{"virt-launcher-monitor", "virt-launcher"} {
		if err := os.WriteFile(filepath.Join(bin, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	records := reachableTemp(t, "vlrec")
	l := &linkRun{u: u, uids: u.uids(), workRoot: shortWorkRoot(t), manifest: manifest, binDir: bin}
	status, err := hostPathRun(t, l, records)
	if err == nil {
		t.Fatalf("vlctl run of a manifest with hostDisks %s and %s, nothing allowed: no error\n%s", secret, evil, status)
	}
	for _, w := range []string{`volume "data"`, secret, "--allow-host-path " + c.dir, `volume "new"`, evil, "--allow-host-path " + filepath.Dir(evil)} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	t.Logf("refused: %v", err)
	if notes, err := os.ReadFile(filepath.Join(out, "notes")); err == nil {
		t.Errorf("the VM's launcher was started; it noted:\n%s", notes)
	}
	if _, err := unix.Getxattr(secret, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("%s has an ACL after the run: %v", secret, err)
	}
	if ents, _ := os.ReadDir(records); len(ents) > 0 {
		t.Errorf("left in the record directory: %v", ents)
	}
	c.untouched(t)
	l.nothingLeft(t)
}
