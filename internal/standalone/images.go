package standalone

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "kubevirt.io/api/core/v1"

	"github.com/virtlauncher/virtlauncher/internal/registrydisk"
	"github.com/virtlauncher/virtlauncher/internal/vmi"
)

// pullTimeout bounds the pull of one containerDisk image.
const pullTimeout = 30 * time.Minute

// pullImages fetches the containerDisk images the manifest names by
// reference (anything but an absolute path) into the directory cache
// (--image-cache), as the kubelet of a cluster would pull them, honouring
// imagePullPolicy. Progress goes to status unless it is nil.
func pullImages(ctx context.Context, cache string, status io.Writer, v *v1.VirtualMachineInstance) (map[string]string, error) {
	images := &registrydisk.Cache{Dir: cache, Status: status}
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
		p, err := images.Fetch(pctx, cd.Image, cd.Path, cd.ImagePullPolicy)
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
		p, err := images.Fetch(pctx, c.Image, f.path, policy)
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
