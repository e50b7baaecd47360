package disks

// Image volumes: KubeVirt's ImageVolume feature gate (on by default since
// v1.9), which virt-controller tells the launcher with --image-volume.
//
// The pod then mounts container disk N's image read-only at
// Layout.ImageVolume(N) and a kernelBoot container's image read-only at
// Layout.KernelBootVolumeDir, instead of having virt-handler bind-mount the
// disk files into the container-disk directory. Everything after this step
// (the image checks, the converter) reads the classic paths,
// Layout.ContainerDiskImage(N) and Layout.KernelBootDir()/<base name>, so
// LinkImageVolumes makes those symbolic links to the files inside the
// images, as KubeVirt's launcher does (virtwrap/manager.go,
// linkImageVolumeFilePaths).
//
// Which file, by KubeVirt's rules:
//   - containerDisk.path set: that path inside the image;
//   - containerDisk.path unset: the image's only entry at its root when that
//     entry is not a directory (an artifact pushed with ORAS), else the only
//     entry of its /disk directory, which must not be a directory either (a
//     classic container-disk image, e.g. /disk/disk.img);
//   - kernelBoot: kernelPath and initrdPath inside the kernel-boot image.
//
// The images are user content, and the launcher may be root. A path is
// resolved inside its image as if the image were the root directory:
// symbolic links are followed, but an absolute target, or "..", starts from
// or climbs no higher than the image's own root, so nothing outside the
// image is ever reached (KubeVirt's safepath.JoinAndResolveWithRelativeRoot
// resolves the same way). The link points at the resolved path, which holds
// no symbolic link; that is checked again by walking it component by
// component with O_NOFOLLOW. The images are read-only mounts, so the result
// cannot change afterwards.
//
// Where we are stricter than KubeVirt: each disk's image is its own root
// (KubeVirt resolves a given path against the directory holding all the disk
// images, so an absolute link in one image can reach another image, and
// checks /disk with a stat that follows links); the file must be a regular
// file; and a link left at the classic path that points elsewhere is an
// error, where KubeVirt keeps whatever is there.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	v1 "kubevirt.io/api/core/v1"
)

// imageDiskDir is where a classic container-disk image keeps its disk
// (KubeVirt's DiskSourceFallbackPath).
const imageDiskDir = "/disk"

// maxSymlinks bounds the links followed while resolving one path, as the
// kernel's own lookup does (ELOOP after 40).
const maxSymlinks = 40

// LinkImageVolumes points the classic container-disk and kernel-boot paths
// of vmi at their files in the image volumes (see the top of this file).
// Links made by an earlier call are kept; on any error the links and the
// directory this call made are removed again, so a failed Sync leaves
// nothing behind.
func (p *Preparer) LinkImageVolumes(vmi *v1.VirtualMachineInstance) (err error) {
	var made []string // in creation order
	defer func() {
		if err != nil {
			for i := len(made) - 1; i >= 0; i-- {
				_ = os.Remove(made[i])
			}
		}
	}()
	l := p.Layout
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		if vol.ContainerDisk == nil {
			continue
		}
		root := l.ImageVolume(i)
		if err := checkMounted(root); err != nil {
			return fmt.Errorf("volume %s: containerDisk image volume: %w", vol.Name, err)
		}
		target, err := findImageVolumeDisk(root, vol.ContainerDisk.Path)
		if err != nil {
			return fmt.Errorf("volume %s: containerDisk image volume %s: %w", vol.Name, root, err)
		}
		created, err := linkTo(target, l.ContainerDiskImage(i))
		if err != nil {
			return fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		if created {
			made = append(made, l.ContainerDiskImage(i))
			p.log().Info("linked container disk from its image volume", "volume", vol.Name, "link", l.ContainerDiskImage(i), "target", target)
		}
	}

	fw := vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil || fw.KernelBoot.Container.Image == "" {
		return nil
	}
	const field = "spec.domain.firmware.kernelBoot.container"
	c := fw.KernelBoot.Container
	if c.KernelPath != "" && c.InitrdPath != "" && filepath.Base(c.KernelPath) == filepath.Base(c.InitrdPath) {
		return fmt.Errorf("%s: kernelPath %q and initrdPath %q have the same file name; the launcher keeps both in one directory", field, c.KernelPath, c.InitrdPath)
	}
	if err := checkMounted(l.KernelBootVolumeDir); err != nil {
		return fmt.Errorf("%s: kernel boot image volume: %w", field, err)
	}
	dir := l.KernelBootDir()
	switch fi, err := os.Lstat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		made = append(made, dir)
		if err := p.chown(dir); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("kernel boot directory: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("kernel boot directory %s exists and is not a directory", dir)
	}
	for _, a := range []struct{ name, path string }{{"kernelPath", c.KernelPath}, {"initrdPath", c.InitrdPath}} {
		if a.path == "" {
			continue
		}
		target, err := resolveFile(l.KernelBootVolumeDir, a.path)
		if err != nil {
			return fmt.Errorf("%s.%s: kernel boot image volume %s: %w", field, a.name, l.KernelBootVolumeDir, err)
		}
		dst := filepath.Join(dir, filepath.Base(a.path))
		created, err := linkTo(target, dst)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", field, a.name, err)
		}
		if created {
			made = append(made, dst)
			p.log().Info("linked kernel boot file from its image volume", "field", a.name, "link", dst, "target", target)
		}
	}
	return nil
}

// checkMounted tells a missing image volume from a missing file in it.
func checkMounted(root string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("%s is not there (is the image volume mounted?): %w", root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", root)
	}
	return nil
}

// findImageVolumeDisk returns the host path of a container disk's file in
// its image volume root: path when given, else by KubeVirt's search rules.
func findImageVolumeDisk(root, path string) (string, error) {
	if path != "" {
		return resolveFile(root, path)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", fmt.Errorf("read the image's root: %w", err)
	}
	if len(entries) == 1 && !entries[0].IsDir() {
		// A symbolic link counts as a file here, as in KubeVirt; it must
		// resolve to one inside the image.
		return resolveFile(root, "/"+entries[0].Name())
	}
	dirPath, fi, err := resolveInRoot(root, imageDiskDir)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("no disk file: containerDisk.path is not set, the image's root has %d entries (not a single file) and no %s directory", len(entries), imageDiskDir)
	}
	entries, err = os.ReadDir(dirPath)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", imageDiskDir, err)
	}
	if len(entries) != 1 || entries[0].IsDir() {
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return "", fmt.Errorf("no disk file: containerDisk.path is not set and %s holds %d entries %q, not exactly one file; set containerDisk.path", imageDiskDir, len(entries), names)
	}
	rel, err := filepath.Rel(root, filepath.Join(dirPath, entries[0].Name()))
	if err != nil {
		return "", err
	}
	return resolveFile(root, "/"+rel)
}

// resolveFile is resolveInRoot for a path that must be a regular file.
func resolveFile(root, path string) (string, error) {
	host, fi, err := resolveInRoot(root, path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	return host, nil
}

// resolveInRoot resolves path inside root as if root were "/" (see the top
// of this file) and returns the host path it names, which holds no symbolic
// link below root, with what is there.
func resolveInRoot(root, path string) (string, fs.FileInfo, error) {
	if strings.ContainsRune(path, 0) {
		return "", nil, fmt.Errorf("path %q holds a NUL byte", path)
	}
	pending := strings.Split(path, "/")
	var cur []string // resolved components below root, none a symlink
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		next := append(cur[:len(cur):len(cur)], c)
		host := filepath.Join(root, filepath.Join(next...))
		fi, err := os.Lstat(host)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", nil, fmt.Errorf("%s does not exist in the image (resolving %s)", "/"+strings.Join(next, "/"), path)
			}
			return "", nil, fmt.Errorf("resolve %s: %w", path, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", nil, fmt.Errorf("resolve %s: more than %d symbolic links", path, maxSymlinks)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", nil, fmt.Errorf("resolve %s: %w", path, err)
		}
		if strings.HasPrefix(target, "/") {
			cur = nil // the image's root, not the host's
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	fi, err := statNoFollow(root, cur)
	if err != nil {
		return "", nil, fmt.Errorf("resolve %s: %w", path, err)
	}
	return filepath.Join(root, filepath.Join(cur...)), fi, nil
}

// statNoFollow walks comps from root with O_PATH|O_NOFOLLOW, one component
// at a time, so that a symbolic link anywhere below root fails the walk
// instead of being followed, and describes what it reached.
func statNoFollow(root string, comps []string) (fs.FileInfo, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	for i, c := range comps {
		nfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("open /%s below %s without following links: %w", strings.Join(comps[:i+1], "/"), root, err)
		}
		fd = nfd
	}
	f := os.NewFile(uintptr(fd), root)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("/%s below %s is a symbolic link", strings.Join(comps, "/"), root)
	}
	return fi, nil
}

// linkTo makes link a symbolic link to target. An existing link to the same
// target is kept (created=false); anything else already at link is an
// error, never replaced.
func linkTo(target, link string) (created bool, err error) {
	err = os.Symlink(target, link)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return false, fmt.Errorf("link %s to %s: %w", link, target, err)
	}
	if got, rerr := os.Readlink(link); rerr == nil && got == target {
		return false, nil
	}
	return false, fmt.Errorf("link %s to %s: %s already exists and is not that link", link, target, link)
}
