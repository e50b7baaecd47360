package standalone

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/launchertest"
	"github.com/virtlauncher/virtlauncher/internal/pod"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/testenv"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// Root must never act through a path a less privileged user can change:
// what root writes into a run's work dir, checked with links planted where
// root writes (tests as root; the launcher's user is virtlauncher, or
// nobody where it does not exist).

// stageFixture is a runner ready for prepare, with a short work root, a
// containerDisk image, fake launcher binaries root alone can reach (so
// they are copied) and an outside directory whose one file must never
// change.
type stageFixture struct {
	r                *runner
	outside, secret  string
	workRoot, binDir string
}

func launcherUser(t *testing.T) vmuser.User {
	t.Helper()
	testenv.Root(t, "the work dir is handed to another user")
	for _, name := range []string{launchertest.TestUser, "nobody"} {
		if o, err := testUser(name); err == nil {
			return o
		}
	}
	testenv.Need(t, "user virtlauncher or nobody", errors.New("neither exists"))
	return vmuser.User{}
}

// shortRoot makes a work root under /run: the socket paths below a work
// dir leave only a few bytes for it.
func shortRoot(t *testing.T) string {
	t.Helper()
	for i := 0; i < 100; i++ {
		d := fmt.Sprintf("/run/vk%04x", time.Now().UnixNano()&0xffff)
		if err := os.Mkdir(d, 0o755); err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	t.Fatal("no free short directory under /run")
	return ""
}

func newStageFixture(t *testing.T) *stageFixture {
	t.Helper()
	o := launcherUser(t)
	top := t.TempDir() // 0700: the launcher's user cannot reach below it
	f := &stageFixture{outside: filepath.Join(top, "outside"), binDir: filepath.Join(top, "bin"), workRoot: shortRoot(t)}
	for _, d := range []string{f.outside, f.binDir, filepath.Join(top, "images")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.secret = filepath.Join(f.outside, "secret")
	img := filepath.Join(top, "images", "disk.img")
	for p, mode := range map[string]os.FileMode{f.secret: 0o600, img: 0o644,
		filepath.Join(f.binDir, "virt-launcher-monitor"): 0o755, filepath.Join(f.binDir, "virt-launcher"): 0o755} {
		if err := os.WriteFile(p, []byte("root's\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	v := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "default", UID: "u1"}}
	v.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: img}}}}
	cfg := Config{HostOptions: HostOptions{WorkRoot: f.workRoot, BinDir: f.binDir, CapsCache: "none"}, ReportOptions: ReportOptions{Status: &strings.Builder{}}}
	cfg.defaults()
	f.r = &runner{cfg: session{Config: cfg, guest: boot{}}, vmi: v, owner: vmID{User: o}, storage: userstorage.NewHeld(o, cfg.Status), log: cfg.Log}
	t.Cleanup(func() { f.r.cleanup() })
	return f
}

// untouched: the outside directory holds its one file, unchanged, root's.
func (f *stageFixture) untouched(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(f.secret)
	st, serr := os.Stat(f.secret)
	if err != nil || serr != nil || string(b) != "root's\n" || st.Sys().(*syscall.Stat_t).Uid != 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("outside file changed: %q %v %v", b, err, st)
	}
	if ents, _ := os.ReadDir(f.outside); len(ents) != 1 {
		t.Errorf("outside directory holds %d entries, want 1", len(ents))
	}
	if st, err := os.Stat(f.outside); err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("outside directory changed owner: %v", err)
	}
}

func wantRefused(t *testing.T, err error, path string) {
	t.Helper()
	if err == nil || !errors.Is(err, safefs.ErrSymlink) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v, want a refused link naming %s", err, path)
	}
}

// TestHandOverLayout: after prepare, staging and the hand-over the work
// dir is root's (0750, the user's group) with root's files in it, and the
// pod directories are the user's.
func TestHandOverLayout(t *testing.T) {
	f := newStageFixture(t)
	r := f.r
	for _, step := range []func() error{r.prepare, r.stageLauncher, func() error { return preparePod(r, nil) }} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Lstat(r.workDir)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || int(sys.Gid) != r.owner.GID || st.Mode().Perm() != 0o750 {
		t.Errorf("work dir %d:%d %v, want 0:%d 0750", sys.Uid, sys.Gid, st.Mode().Perm(), r.owner.GID)
	}
	for _, p := range []string{"launcher.log", "bin", "bin/virt-launcher", "bin/virt-launcher-monitor"} {
		st, err := os.Lstat(filepath.Join(r.workDir, p))
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != 0 || st.Mode()&os.ModeSymlink != 0 {
			t.Errorf("%s: %v %v, want root's", p, st, err)
		}
	}
	for _, p := range []string{"share", "share/container-disks/disk_0.img", "private", "ephemeral", "libvirt-run", "dev"} {
		st, err := os.Lstat(filepath.Join(r.workDir, p))
		if err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != r.owner.UID {
			t.Errorf("%s: %v, want the launcher user's", p, err)
		}
	}
	if r.pod.bins[0] != filepath.Join(r.workDir, "bin", "virt-launcher-monitor") {
		t.Errorf("monitor binary %s, want the copy", r.pod.bins[0])
	}
	f.untouched(t)
}

// TestStageRefusesLinks: a link planted where root then writes is refused,
// with the path named, and nothing outside changes.
func TestStageRefusesLinks(t *testing.T) {
	t.Run("launcher.log", func(t *testing.T) {
		f := newStageFixture(t)
		if err := f.r.prepare(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(f.r.workDir, "launcher.log")
		if err := os.Symlink(f.secret, p); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, f.r.stageLauncher(), p)
		f.untouched(t)
	})
	t.Run("bin", func(t *testing.T) {
		f := newStageFixture(t)
		if err := f.r.prepare(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(f.r.workDir, "bin")
		if err := os.Symlink(f.outside, p); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, f.r.stageLauncher(), p)
		f.untouched(t)
	})
	t.Run("container-disk link", func(t *testing.T) {
		f := newStageFixture(t)
		r := f.r
		// The directory the image link goes to, swapped for a link to
		// outside, as if planted before root made the link.
		root, err := r.openWorkRoot()
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		dir, d, err := makeWorkDir(root)
		if err != nil {
			t.Fatal(err)
		}
		r.workDir, r.dir = dir, d
		p := filepath.Join(dir, "share")
		if err := os.Symlink(f.outside, p); err != nil {
			t.Fatal(err)
		}
		err = r.dir.MkdirAll("share/container-disks", 0o750)
		wantRefused(t, err, p)
		err = r.dir.Symlink(f.secret, "share/container-disks/disk_0.img")
		wantRefused(t, err, p)
		f.untouched(t)
	})
}

// TestHandOverRefusesLinks: the hand-over changes links themselves, never
// what they point to, and refuses a hard link to a file outside.
func TestHandOverRefusesLinks(t *testing.T) {
	t.Run("symlinks", func(t *testing.T) {
		f := newStageFixture(t)
		r := f.r
		if err := r.prepare(); err != nil {
			t.Fatal(err)
		}
		// A pod directory replaced by a link, and a link to a file.
		kb := filepath.Join(r.workDir, "share", "container-disks", "kernel-boot")
		plant := func() error {
			if err := os.Remove(kb); err != nil {
				return err
			}
			for p, target := range map[string]string{kb: f.outside, filepath.Join(r.workDir, "private", "f"): f.secret} {
				if err := os.Symlink(target, p); err != nil {
					return err
				}
			}
			return nil
		}
		if err := preparePod(r, plant); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Lstat(kb)
		if int(st.Sys().(*syscall.Stat_t).Uid) != r.owner.UID {
			t.Error("the link itself was not handed over")
		}
		f.untouched(t)
	})
	t.Run("hard link", func(t *testing.T) {
		f := newStageFixture(t)
		r := f.r
		if err := r.prepare(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(r.workDir, "private", "hard")
		err := preparePod(r, func() error { return os.Link(f.secret, p) })
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "hard links") {
			t.Errorf("got %v, want a refused hard link naming %s", err, p)
		}
		os.Remove(p)
		f.untouched(t)
	})
}

// preparePod makes the run's pod up to and with the hand-over
// (pod.Spec.Prepare); plant, if set, runs after the run's own fill.
func preparePod(r *runner, plant func() error) error {
	s := r.podSpec(context.Background())
	if plant != nil {
		fill := s.Fill
		s.Fill = func() error {
			if err := fill(); err != nil {
				return err
			}
			return plant()
		}
	}
	_, err := s.Prepare(context.Background())
	return err
}

// TestWorkRootTrusted: a work root the launcher's user could change is
// refused; root's own, or a root-owned sticky one like /tmp, is used.
func TestWorkRootTrusted(t *testing.T) {
	f := newStageFixture(t)
	r := f.r
	sub := filepath.Join(f.workRoot, "w")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sub, r.owner.UID, r.owner.GID); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{sub, filepath.Join(sub, "below")} {
		r.cfg.WorkRoot = root
		_, err := r.openWorkRoot()
		if err == nil || !strings.Contains(err.Error(), "can be changed by user "+r.owner.Name) {
			t.Errorf("%s: got %v, want refused", root, err)
		}
	}
	if err := os.Chown(sub, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	r.cfg.WorkRoot = sub
	d, err := r.openWorkRoot()
	if err != nil {
		t.Fatalf("sticky root-owned work root: %v", err)
	}
	d.Close()
	// A link as the work root is followed only when nothing on the way can
	// be changed by the user; what is opened is the resolved directory.
	link := filepath.Join(f.workRoot, "l")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	r.cfg.WorkRoot = link
	if d, err = r.openWorkRoot(); err != nil {
		t.Fatal(err)
	}
	if d.Path() != sub {
		t.Errorf("opened %s, want %s", d.Path(), sub)
	}
	d.Close()
}

// testUser is an account as the VM's user of a test that needs a known one.
func testUser(name string) (vmuser.User, error) {
	uid, gid, err := pod.LookupUser(name)
	return vmuser.User{UID: uid, GID: gid, Name: name}, err
}
