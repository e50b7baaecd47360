package reliability

// A manifest's hostDisk names a path of the host, and a manifest is often
// someone else's (a tutorial's, a colleague's). `vlctl run` runs as root:
// it must not hand the VM's id a file of the host, or create one in a
// directory of the host, because a manifest asked. As docker run needs -v
// for a host path, the person running vlctl allows directories with
// --allow-host-path; elsewhere a hostDisk is refused before anything is
// made, and a link cannot lead out of an allowed directory.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/virtlauncher/virtlauncher/internal/standalone"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
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

// hostPathRun runs the manifest with the script monitor as l's user,
// allowing dirs with --allow-host-path.
func hostPathRun(l *linkRun, records string, dirs ...string) (string, error) {
	return l.runWith(records, func(c *standalone.Config) { c.AllowHostPaths = dirs })
}

// hostPathSetup writes the script monitor, as u, noting in out.
func hostPathSetup(t *testing.T, u linkUser, out, secret, created string) *linkRun {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "vmi.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf(hostPathManifest, secret, created)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := strings.ReplaceAll(hostDiskMonitor, "@OUT@", out)
	for _, n := range []string{"virt-launcher-monitor", "virt-launcher"} {
		if err := os.WriteFile(filepath.Join(bin, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &linkRun{u: u, uids: u.uids(), workRoot: shortWorkRoot(t), manifest: manifest, binDir: bin}
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
	records := testenv.OpenDir(t)
	l := hostPathSetup(t, u, out, secret, evil)
	status, err := hostPathRun(l, records)
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

// TestHostPathAllowed: with --allow-host-path DIR, a manifest whose
// hostDisk leads out of DIR through a link planted in it (to the canary's
// root-owned 0600 file) is refused before anything is made, as in
// TestHostPathNotAllowed; one whose hostDisks are below DIR runs, and the
// VM's user reads the existing file and the one created for it. After the
// run the file has no ACL, the created one is gone (the guest never ran),
// and nothing outside DIR changed.
func TestHostPathAllowed(t *testing.T) {
	u := needLinkUser(t)
	c := newCanary(t)
	out := userDir(t, u)
	allowed := testenv.OpenDir(t)
	data := filepath.Join(allowed, "data.img")
	if err := os.WriteFile(data, []byte("the user's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(c.dir, filepath.Join(allowed, "out")); err != nil {
		t.Fatal(err)
	}
	records := testenv.OpenDir(t)
	listing := func() string {
		var b strings.Builder
		ents, _ := os.ReadDir(allowed)
		for _, e := range ents {
			fi, _ := os.Lstat(filepath.Join(allowed, e.Name()))
			fmt.Fprintf(&b, "%s %v\n", e.Name(), fi.Mode())
		}
		return b.String()
	}
	before := listing()

	l := hostPathSetup(t, u, out, filepath.Join(allowed, "out", "secret"), filepath.Join(allowed, "new.img"))
	status, err := hostPathRun(l, records, allowed)
	if err == nil || !strings.Contains(err.Error(), "leads to "+filepath.Join(c.dir, "secret")) || !strings.Contains(err.Error(), "outside "+allowed) {
		t.Fatalf("vlctl run of a hostDisk leading out of %s: %v; want a refusal naming where it leads\n%s", allowed, err, status)
	}
	t.Logf("refused: %v", err)
	if notes, err := os.ReadFile(filepath.Join(out, "notes")); err == nil {
		t.Errorf("the VM's launcher was started; it noted:\n%s", notes)
	}
	if now := listing(); now != before {
		t.Errorf("%s changed:\n%s\nnow:\n%s", allowed, before, now)
	}
	c.untouched(t)
	l.nothingLeft(t)

	l = hostPathSetup(t, u, out, data, filepath.Join(allowed, "new.img"))
	status, err = hostPathRun(l, records, allowed)
	if err == nil || !strings.Contains(err.Error(), "hostdisk monitor done") {
		t.Fatalf("vlctl run: %v, want the fake launcher's failure\n%s", err, status)
	}
	notes, err := os.ReadFile(filepath.Join(out, "notes"))
	if err != nil {
		t.Fatalf("the monitor left no notes: %v", err)
	}
	for _, w := range []string{"read data.img the user's data\n", "read new.img \n"} {
		if !strings.Contains(string(notes), w) {
			t.Errorf("the VM's user did not note %q; it noted:\n%s", w, notes)
		}
	}
	if _, err := unix.Getxattr(data, "system.posix_acl_access", make([]byte, 256)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("%s has an ACL after the run: %v", data, err)
	}
	if now := listing(); now != before {
		t.Errorf("%s after the run:\n%s\nwant as before:\n%s", allowed, now, before)
	}
	if ents, _ := os.ReadDir(records); len(ents) > 0 {
		t.Errorf("left in the record directory: %v", ents)
	}
	c.untouched(t)
	l.nothingLeft(t)
}
