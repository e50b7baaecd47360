package standalone

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/virtlauncher/virtlauncher/internal/layout"
	"github.com/virtlauncher/virtlauncher/internal/safefs"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmuser"
)

// prepare checks the manifest's files, opens the user's disks and images
// and makes the working directory, which root alone can enter until the
// pod's hand-over (launch).
func (r *runner) prepare() error {
	// The manifest's files are checked before anything is made.
	if _, err := r.localImages(layout.Layout{}); err != nil {
		return err
	}
	specs, err := userstorage.Plan(r.vmi, r.vm, r.cfg.Volumes, r.cfg.hostPaths())
	if err != nil {
		return err
	}
	if err := r.storage.Open(r.vmi, specs); err != nil {
		return err
	}
	if err := r.storage.OpenImages(r.cfg.pulled); err != nil {
		return err
	}
	root, err := r.openWorkRoot()
	if err != nil {
		return err
	}
	defer root.Close()
	dir, d, err := makeWorkDir(root)
	if err != nil {
		return err
	}
	r.workDir, r.dir = dir, d
	r.layout = layout.Under(dir)
	return nil
}

// fill links the user's disks and the local images where a cluster would
// have mounted them, writes the configuration volumes and makes the
// virtiofs sockets' directory: the pod's Fill, while the pod directories
// are root's. Everything is made through the work dir's descriptor, never
// following a link.
func (r *runner) fill() error {
	if err := r.storage.Link(r.dir, r.layout, r.rel); err != nil {
		return err
	}
	if err := r.writeConfigVolumes(); err != nil {
		return err
	}
	links, err := r.localImages(r.layout)
	if err != nil {
		return err
	}
	for _, k := range links {
		rel, err := r.rel(k.dst)
		if err != nil {
			return err
		}
		if err := r.dir.Symlink(k.src, rel); err != nil {
			return fmt.Errorf("%s: link: %w", k.field, err)
		}
	}
	return r.virtiofs.stage(r.layout, r.stageBinary, func(p string) error {
		rel, err := r.rel(p)
		if err != nil {
			return err
		}
		return r.dir.MkdirAll(rel, 0o700)
	})
}

// openWorkRoot makes the work root (0755) when missing and opens it. It is
// refused when the launcher's user could change it or a directory above
// it: root makes the run's directory there and removes it by name at the
// end. A sticky directory such as /tmp is fine, since no other user can
// rename or remove root's entries in it.
func (r *runner) openWorkRoot() (*safefs.Dir, error) {
	if err := os.MkdirAll(r.cfg.WorkRoot, 0o755); err != nil {
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	real, err := vmuser.ResolveTrusted(r.cfg.WorkRoot, r.owner.User)
	if err != nil {
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	d, err := safefs.Open(real)
	if err != nil {
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	st, err := d.Stat()
	// In a sticky directory only its owner may remove or rename others'
	// entries.
	if err == nil && r.owner.CanChange(int(st.Uid), int(st.Gid), os.FileMode(st.Mode).Perm()) &&
		(st.Mode&syscall.S_ISVTX == 0 || int(st.Uid) == r.owner.UID) {
		err = fmt.Errorf("%s can be changed by user %s, which runs QEMU", real, r.owner.Name)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("work root %s: %w", r.cfg.WorkRoot, err)
	}
	return d, nil
}

// longestSocketSuffix is the longest path libvirt puts below a launcher's
// work dir: <dir>/private/libvirt/qemu/channel/target/domain-<id>-<name cut
// to 20>/org.qemu.guest_agent.0, with room for a 2-digit domain id (each
// launcher has a daemon of its own, which numbers its domains from 1).
const longestSocketSuffix = len("/private/libvirt/qemu/channel/target/domain-12-") + 20 + len("/org.qemu.guest_agent.0")

// maxSocketPath is the longest unix socket path (sun_path holds 108 bytes).
const maxSocketPath = 107

// makeWorkDir creates a work dir (0700, root's) with a short random name
// in root, opens it, and refuses a root so long that libvirt's sockets
// would not fit.
func makeWorkDir(root *safefs.Dir) (string, *safefs.Dir, error) {
	if len(root.Path())+1+4+longestSocketSuffix > maxSocketPath {
		return "", nil, fmt.Errorf("--workdir %q: too long for unix socket paths below it (at most %d bytes)",
			root.Path(), maxSocketPath-longestSocketSuffix-5)
	}
	for i := 0; i < 100; i++ {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", nil, err
		}
		name := hex.EncodeToString(b[:])
		err := root.Mkdir(name, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("work dir: %w", err)
		}
		d, err := root.OpenDir(name)
		if err != nil {
			root.Remove(name)
			return "", nil, fmt.Errorf("work dir: %w", err)
		}
		return root.Join(name), d, nil
	}
	return "", nil, fmt.Errorf("work dir: no free name under %s", root.Path())
}

// takeBack closes the work dir to everyone but root, so that nothing
// below it changes while root removes it.
func takeBack(dir *safefs.Dir) error {
	if dir == nil {
		return nil
	}
	if err := dir.Chmod(0o700); err != nil {
		return fmt.Errorf("take back the work dir: %w", err)
	}
	return nil
}

// link is a local file put where a cluster would have mounted it.
type link struct {
	field    string // the manifest field it comes from
	src, dst string // dst relative to the layout, by a Layout method
}

// localImages checks the manifest's local images and says where each goes.
// It stands in for the handler's bind mounts: a containerDisk image is an
// absolute path to a local disk image or a reference pullImages pulled (it
// becomes disk_<i>.img), and a kernelBoot container image an absolute path
// to a directory holding kernelPath and initrdPath.
func (r *runner) localImages(l layout.Layout) ([]link, error) {
	var links []link
	for i, vol := range r.vmi.Spec.Volumes {
		if vol.ContainerDisk == nil {
			continue
		}
		field := fmt.Sprintf("spec.volumes[%d].containerDisk.image", i)
		img := vol.ContainerDisk.Image
		if p, ok := r.cfg.pulled[img]; ok {
			img = p
		}
		if !filepath.IsAbs(img) {
			return nil, fmt.Errorf("%s: %q was not pulled; give an image reference or the absolute path of a local disk image", field, img)
		}
		st, err := os.Stat(img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: %q is not a regular file", field, img)
		}
		links = append(links, link{field, img, l.ContainerDiskImage(i)})
	}
	fw := r.vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil {
		return links, nil
	}
	c := fw.KernelBoot.Container
	const field = "spec.domain.firmware.kernelBoot.container"
	local := filepath.IsAbs(c.Image)
	if local {
		if st, err := os.Stat(c.Image); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s.image: %q is not a directory", field, c.Image)
		}
	}
	for _, f := range []struct{ name, path string }{{"kernelPath", c.KernelPath}, {"initrdPath", c.InitrdPath}} {
		if f.path == "" {
			continue
		}
		src, ok := r.cfg.pulled[kernelBootKey(c.Image, f.path)]
		switch {
		case local:
			src = filepath.Join(c.Image, filepath.Clean("/"+f.path))
		case !ok:
			return nil, fmt.Errorf("%s.image: %q was not pulled; give an image reference or the absolute path of a local directory", field, c.Image)
		}
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, f.name, err)
		}
		links = append(links, link{field + "." + f.name, src, filepath.Join(l.KernelBootDir(), filepath.Base(f.path))})
	}
	return links, nil
}

// stageLauncher puts into the work dir, beside the pod directories and
// before the pod's hand-over, while root alone can write there,
// what the monitor starts with: copies of the binaries when the launcher's
// user cannot reach the build's, and launcher.log, the output of the
// monitor, launcher and QEMU (a fresh file, O_EXCL and never through a
// link: the fd is handed to QEMU). The VM's passwd and group are the
// pod's to write (pod.Spec.OwnPasswd).
func (r *runner) stageLauncher() error {
	for i, name := range []string{"virt-launcher-monitor", "virt-launcher"} {
		b, err := r.stageBinary(name, "launcher binaries (build them with `make build`)")
		if err != nil {
			return err
		}
		r.pod.bins[i] = b
	}
	f, err := r.dir.OpenFile("launcher.log", os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("launcher log: %w", err)
	}
	r.pod.logFile = f
	return nil
}

// reachable reports whether the user o can execute path: every directory
// on the way must be searchable and the file executable for it, judged by
// owner, primary group and other permission bits.
func reachable(path string, o vmuser.User) bool {
	allowed := func(p string) bool {
		st, err := os.Stat(p)
		if err != nil {
			return false
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		perm := st.Mode().Perm()
		switch {
		case int(sys.Uid) == o.UID:
			return perm&0o100 != 0
		case int(sys.Gid) == o.GID:
			return perm&0o010 != 0
		default:
			return perm&0o001 != 0
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	for p := abs; ; p = filepath.Dir(p) {
		if !allowed(p) {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

// stageBinary is the path of the build's binary name for the VM's user to
// run: the build's own, or a copy in the work dir when the build's bin/
// sits where the user cannot reach it (a clone under /root, or in a
// mktemp -d directory); the copy goes away with the run. what says in the
// error which binary is missing.
func (r *runner) stageBinary(name, what string) (string, error) {
	b := filepath.Join(r.cfg.BinDir, name)
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if reachable(b, r.owner.User) {
		return b, nil
	}
	return copyBinary(b, r.dir, "bin")
}

// copyBinary copies the executable src into the directory sub of d
// (created 0755), never through a link, and returns the copy's path.
func copyBinary(src string, d *safefs.Dir, sub string) (string, error) {
	if err := d.MkdirAll(sub, 0o755); err != nil {
		return "", err
	}
	sd, err := d.OpenDir(sub)
	if err != nil {
		return "", err
	}
	defer sd.Close()
	// Whatever root's umask: the launcher's user must reach the copy.
	if err := sd.Chmod(0o755); err != nil {
		return "", err
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	name := filepath.Base(src)
	out, err := sd.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	_, cerr := io.Copy(out, in)
	if err := errors.Join(cerr, out.Chmod(0o755), out.Close()); err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	return sd.Join(name), nil
}
