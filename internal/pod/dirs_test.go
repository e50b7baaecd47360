package pod

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/virtlauncher/virtlauncher/internal/launcherflags"
	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/monitor"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
)

// owner is the uid and gid of path itself (links not followed).
func owner(t *testing.T, path string) (int, int, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), fi.Mode()
}

// TestDirsHandOver: the pod directories are made root's, and the hand-over
// gives them and what root put into them to the user, links themselves
// and not their targets; the pod's own directory stays root's, 0750 with
// the user's group; the images root keeps beside them stay root's.
func TestDirsHandOver(t *testing.T) {
	testenv.Root(t, "changing owners needs root")
	const uid, gid = 1879199999, 1879199998
	dir := t.TempDir()
	root, err := safefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	l := layout.Under(dir)
	d, err := MakeDirs(root, l, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.PodDirs(false) {
		if u, _, m := owner(t, p); u != 0 || !m.IsDir() || m.Perm() != 0o700 {
			t.Errorf("%s before the hand-over: uid %d mode %v, want a root directory 0700", p, u, m)
		}
	}
	// What root fills in before the hand-over: a link to an image of its
	// own outside the pod directories, and a file.
	image := filepath.Join(dir, "images", "disk_0.img")
	if err := os.MkdirAll(filepath.Dir(image), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(image, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(image, l.ContainerDiskImage(0)); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(l.PrivateDir, "cache.json")
	if err := os.WriteFile(cache, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.HandOver(uid, gid); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(l.PodDirs(false), l.ContainerDiskImage(0), cache) {
		if u, g, _ := owner(t, p); u != uid || g != gid {
			t.Errorf("%s after the hand-over: %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	for _, p := range []string{image, filepath.Dir(image)} {
		if u, _, _ := owner(t, p); u != 0 {
			t.Errorf("%s: uid %d, want root's (not a pod directory)", p, u)
		}
	}
	if u, g, m := owner(t, dir); u != 0 || g != gid || m.Perm() != 0o750 {
		t.Errorf("pod dir: %d:%d %v, want 0:%d 0750", u, g, m.Perm(), gid)
	}
}

// TestMakeDirsRefusesOutside: a layout whose directories are not below the
// pod's directory is refused before anything is made there.
func TestMakeDirsRefusesOutside(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	root, err := safefs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = MakeDirs(root, layout.Under(other), false)
	if err == nil || !strings.Contains(err.Error(), "is not below") {
		t.Fatalf("MakeDirs with a layout elsewhere: %v, want a refusal", err)
	}
	if ents, _ := os.ReadDir(other); len(ents) != 0 {
		t.Errorf("made %v in the other directory", ents)
	}
}

// TestPodDirs: ImageVolume pods have no container-disk volume; a layout
// whose block devices are the host's /dev does not make /dev.
func TestPodDirs(t *testing.T) {
	l := layout.Under("/p")
	if !slices.Contains(l.PodDirs(false), l.ContainerDiskDir) || slices.Contains(l.PodDirs(true), l.ContainerDiskDir) {
		t.Errorf("container-disk dir: classic %v, image volume %v", l.PodDirs(false), l.PodDirs(true))
	}
	if !slices.Contains(l.PodDirs(false), l.BlockDeviceDir) || slices.Contains(layout.Default().PodDirs(false), "/dev") {
		t.Errorf("block device dir: under %v, default %v", l.PodDirs(false), layout.Default().PodDirs(false))
	}
}

// TestMonitorCommand: the one way the three starters build the monitor's
// process.
func TestMonitorCommand(t *testing.T) {
	o := launcherflags.Defaults()
	o.Name, o.Namespace, o.UID = "vm", "ns", "u-1"
	cred := &syscall.Credential{Uid: 5, Gid: 6}
	m := Monitor{Bin: "/b/virt-launcher-monitor", Launcher: "/b/virt-launcher", Flags: o, Extra: []string{"--x"}, User: cred, Dir: "/p"}
	cmd := m.Command()
	if want := append(append([]string{m.Bin}, o.Args()...), "--x"); !slices.Equal(cmd.Args, want) {
		t.Errorf("args %q, want %q", cmd.Args, want)
	}
	if !slices.Equal(cmd.Env, monitor.Env(m.Launcher)) {
		t.Errorf("env %q, want monitor.Env", cmd.Env)
	}
	a := cmd.SysProcAttr
	if a.Credential != cred || !a.Setpgid || a.Pdeathsig != syscall.SIGTERM || len(a.AmbientCaps) != 0 || cmd.Dir != "/p" {
		t.Errorf("process attributes %+v dir %q", a, cmd.Dir)
	}
	m.Network = true
	if caps := m.Command().SysProcAttr.AmbientCaps; !slices.Equal(caps, []uintptr{monitor.CapNetBindService}) {
		t.Errorf("with a network: ambient caps %v, want CAP_NET_BIND_SERVICE", caps)
	}
}
