package standalone

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/userstorage"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// pullTimeout bounds the pull of one containerDisk image.
const pullTimeout = 30 * time.Minute

// pullImages fetches the containerDisk images the manifest names by
// reference (anything but an absolute path) into cfg.ImageCache, as the
// kubelet of a cluster would pull them, honouring imagePullPolicy.
func pullImages(ctx context.Context, cfg Config, v *v1.VirtualMachineInstance) (map[string]string, error) {
	cache := &registrydisk.Cache{Dir: cfg.ImageCache, Status: cfg.Status}
	if cfg.Quiet {
		cache.Status = nil
	}
	pulled := map[string]string{}
	for i, vol := range v.Spec.Volumes {
		cd := vol.ContainerDisk
		if cd == nil || filepath.IsAbs(cd.Image) {
			continue
		}
		field := fmt.Sprintf("spec.volumes[%d].containerDisk.image", i)
		// A relative path that names a file here is a local image meant:
		// refused rather than looked up in a registry.
		if relativePath(cd.Image) {
			return nil, fmt.Errorf("%s: %q is a relative path; give the absolute path of a local disk image, or an image reference", field, cd.Image)
		}
		if _, err := os.Stat(cd.Image); err == nil {
			return nil, fmt.Errorf("%s: %q is a relative path to a local file; give its absolute path (a name that is not absolute is an image reference)", field, cd.Image)
		}
		pctx, cancel := context.WithTimeout(ctx, pullTimeout)
		p, err := cache.Fetch(pctx, cd.Image, cd.Path, cd.ImagePullPolicy)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w (a local disk image is given by its absolute path)", field, err)
		}
		pulled[cd.Image] = p
	}
	// A kernelBoot container image by reference: its kernel and initrd.
	fw := v.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil || filepath.IsAbs(fw.KernelBoot.Container.Image) {
		return pulled, nil
	}
	c := fw.KernelBoot.Container
	const field = "spec.domain.firmware.kernelBoot.container"
	if relativePath(c.Image) {
		return nil, fmt.Errorf("%s.image: %q is a relative path; give the absolute path of a local directory, or an image reference", field, c.Image)
	}
	for _, f := range []struct{ name, path string }{{"kernelPath", c.KernelPath}, {"initrdPath", c.InitrdPath}} {
		if f.path == "" {
			continue
		}
		policy := c.ImagePullPolicy
		if policy == "" { // KubeVirt leaves it to the kubelet's default
			policy = vmi.DefaultPullPolicy(c.Image)
		}
		pctx, cancel := context.WithTimeout(ctx, pullTimeout)
		p, err := cache.Fetch(pctx, c.Image, f.path, policy)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w (a local kernel is given by the absolute path of its directory in image)", field, f.name, err)
		}
		pulled[kernelBootKey(c.Image, f.path)] = p
	}
	return pulled, nil
}

// relativePath: an image named ./x or ../x means a local path, never a
// reference to look up in a registry.
func relativePath(image string) bool {
	return strings.HasPrefix(image, "./") || strings.HasPrefix(image, "../")
}

// kernelBootKey names a pulled kernelBoot file in Config.pulled.
func kernelBootKey(image, file string) string { return image + "\x00" + file }

// openImages gives the VM's user read access to the pulled files the run
// uses. The image cache is root's alone (registrydisk: images may come
// with root's registry credentials), so, as for the user's own disks, the
// run adds an ACL entry of its own (user:<the VM's uid>:r) to each file,
// which the run record keeps for vlctl gc and the run's end takes out
// (releaseImages); the other runs using the same image have their own.
func (r *runner) openImages() error {
	seen := map[string]bool{}
	for _, key := range slices.Sorted(maps.Keys(r.cfg.pulled)) {
		p := r.cfg.pulled[key]
		if seen[p] {
			continue
		}
		seen[p] = true
		field := "image " + strings.ReplaceAll(key, "\x00", " ")
		f, err := openNoFollow(p)
		if err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
		d := &userDisk{diskSpec: diskSpec{field: field, path: p}, real: p, f: f}
		r.images = append(r.images, d)
		if d.grant, err = userstorage.GrantAccess(f, uint32(r.owner.uid), 4); err != nil {
			return fmt.Errorf("%s: give user %s (QEMU) read access to %s: %w", field, r.owner.name, p, err)
		}
		if !asUser(r.owner, "-r", p) {
			dir := firstClosedDir(p, r.owner)
			return fmt.Errorf("%s: QEMU runs as user %s, which cannot reach %s: directory %s is closed to it (give --image-cache elsewhere, or: chmod o+x %s)", field, r.owner.name, p, dir, dir)
		}
	}
	return nil
}

// releaseImages takes the run's read access to its images out again.
func (r *runner) releaseImages() {
	status := func(format string, a ...any) { fmt.Fprintf(r.cfg.Status, format, a...) }
	for _, d := range r.images {
		d.release(status)
	}
	r.images = nil
}
